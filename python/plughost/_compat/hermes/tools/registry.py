"""``tools.registry`` compat (plughost): the registry plugins reach for.

``registry.register(...)`` inside a plugin's ``register(ctx)`` registers
through that plugin's context (as ``ctx.register_tool``); ``registry.dispatch``
calls a tool through plughost's pipeline, as ``ctx.dispatch_tool``.
``tool_error`` / ``tool_result`` are Hermes's JSON helpers.
"""

from __future__ import annotations

import json

_MAX_TOOL_ERROR_CHARS = 2048
_TOOL_ERROR_TRUNCATION_MARKER = "… [truncated]"


def _bound_error_text(text: str) -> str:
    if len(text) <= _MAX_TOOL_ERROR_CHARS:
        return text
    return text[:_MAX_TOOL_ERROR_CHARS] + _TOOL_ERROR_TRUNCATION_MARKER


def tool_error(message, **extra) -> str:
    """``'{"error": "<message>", **extra}'`` with the message bounded."""
    return json.dumps({"error": _bound_error_text(str(message)), **extra}, ensure_ascii=False)


def tool_result(data=None, **kwargs) -> str:
    """JSON-encode a dict positional arg *or* keyword arguments (not both)."""
    return json.dumps(data if data is not None else kwargs, ensure_ascii=False)


class ToolRegistry:
    """The part of Hermes's ``ToolRegistry`` plugins use."""

    def register(self, name, toolset, schema, handler, check_fn=None, requires_env=None,
                 is_async=False, description="", emoji="", override=False, **_extra):
        import _plughost_hermes

        ctx = _plughost_hermes.current_context()
        if ctx is None:
            raise RuntimeError(
                f"tools.registry.register({name!r}) outside a plugin's register(ctx): plughost "
                "registers tools only while a plugin loads; call it from register(ctx)"
            )
        ctx.register_tool(name, toolset, schema, handler, check_fn=check_fn,
                          requires_env=requires_env, is_async=is_async,
                          description=description, emoji=emoji, override=override)

    def dispatch(self, name: str, args: dict, **kwargs) -> str:
        import _plughost_hermes

        task_id = kwargs.get("task_id")
        return _plughost_hermes.dispatch_tool(name, args, "" if task_id is None else str(task_id))


registry = ToolRegistry()
