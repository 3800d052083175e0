"""``ToolResult``: what a Codumentor tool's ``execute`` returns."""

from __future__ import annotations


class ToolResult:
    """A tool's result; :meth:`llm_content` is the text the model sees."""

    def __init__(self, tool_call_id="", function_name="", content="", success=True, error=None, **extra):
        self.tool_call_id = tool_call_id
        self.function_name = function_name
        self.content = content
        self.success = success
        self.error = error
        for key, value in extra.items():
            setattr(self, key, value)

    def llm_content(self) -> str:
        content = "" if self.content is None else str(self.content)
        if self.success:
            return content
        if self.error:
            return f"Error ({self.error}): {content}"
        return f"Error: {content}"

    def __repr__(self) -> str:
        return (
            f"ToolResult(function_name={self.function_name!r}, success={self.success!r}, "
            f"error={self.error!r}, content={self.content!r})"
        )
