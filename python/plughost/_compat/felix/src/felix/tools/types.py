"""Tool types and ``define_tool``, as ``felix.tools.types`` defines them."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable


def accepts_positional(fn: Callable[..., Any], count: int) -> bool:
    """Can ``fn`` be called with exactly ``count`` positional arguments? (asked once)"""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    required = allowed = 0
    var_positional = False
    for param in sig.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            var_positional = True
            continue
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            continue
        allowed += 1
        if param.default is param.empty:
            required += 1
    if var_positional:
        return required <= count
    return required <= count <= allowed


@dataclass(slots=True)
class ToolOutputDict:
    content: str
    metadata: dict = field(default_factory=dict)


@dataclass(slots=True)
class ToolInvocationCtx:
    manifest_id: "str | None" = None
    tool_call_id: "str | None" = None
    thread_id: "str | None" = None
    signal: Any = None


class _LocalExecutor:
    def __init__(self, execute, transport: str = "local") -> None:
        self._execute = execute
        self.transport = transport

    async def execute(self, args, ctx=None):
        return await self._execute(args, ctx)


@dataclass(slots=True)
class Tool:
    name: str
    description: str
    args_schema: Any
    executor: Any
    raw_input_schema: "dict | None" = None
    is_peer: bool = False
    peer: bool = False
    source: "str | None" = None
    fatal: bool = False
    replay_safe: bool = False

    def __post_init__(self) -> None:
        if self.peer and not self.is_peer:
            self.is_peer = True
        if self.is_peer and not self.peer:
            self.peer = True


def tool_output_content(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, ToolOutputDict):
        return output.content
    if isinstance(output, dict):
        return str(output.get("content", ""))
    return str(getattr(output, "content", output))


output_text = tool_output_content


def define_tool(
    *,
    name: str,
    description: str,
    handler: Callable[..., Any],
    args_schema: Any = None,
    args: Any = None,
    raw_input_schema: "dict | None" = None,
    is_peer: bool = False,
    peer: bool = False,
    source: "str | None" = None,
    fatal: bool = False,
    transport: str = "local",
    replay_safe: bool = False,
    validate: "Callable[[dict], Any] | None" = None,
) -> Tool:
    from felix.tools.errors import tool_error_output

    schema = args_schema if args_schema is not None else args
    takes_ctx = accepts_positional(handler, 2)

    async def _execute(a, ctx=None):
        if validate is not None:
            try:
                parsed = dict(validate(a))
            except Exception as exc:
                return tool_error_output("invalid_arguments", f"[invalid args for {name}] {exc}")
        elif isinstance(schema, type) and hasattr(schema, "model_validate"):
            try:
                parsed = schema.model_validate(a)
            except Exception as exc:
                return tool_error_output("invalid_arguments", f"[invalid args for {name}] {exc}")
        else:
            parsed = a
        result = handler(parsed, ctx) if takes_ctx else handler(parsed)
        if inspect.isawaitable(result):
            result = await result
        return result

    return Tool(
        name=name,
        description=description,
        args_schema=schema,
        raw_input_schema=raw_input_schema
        if raw_input_schema is not None
        else (schema if isinstance(schema, dict) else None),
        is_peer=is_peer or peer,
        peer=peer or is_peer,
        source=source,
        fatal=fatal,
        replay_safe=replay_safe,
        executor=_LocalExecutor(_execute, transport=transport),
    )


__all__ = [
    "Tool",
    "ToolInvocationCtx",
    "ToolOutputDict",
    "accepts_positional",
    "define_tool",
    "output_text",
    "tool_output_content",
]
