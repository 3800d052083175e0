"""Hook actions and contexts of the Flowly plugin API (plughost compat).

Field names, defaults and order follow the Flowly API so that plugins can
construct, read and write them exactly as they do under Flowly.  The classes
are plain records (not dataclasses) to keep interpreter start-up cheap; they
support keyword and positional construction, ``repr`` and ``==``.
"""

from __future__ import annotations

from typing import Any

VALID_EVENTS: set[str] = {
    "pre_tool_call",
    "post_tool_call",
    "transform_tool_result",
    "transform_terminal_output",
    "pre_llm_call",
    "post_llm_call",
    "pre_api_request",
    "post_api_request",
    "on_session_start",
    "on_session_end",
    "on_session_finalize",
    "on_session_reset",
    "subagent_stop",
    "pre_gateway_dispatch",
}

_MUTABLE_DEFAULTS = {"dict": dict, "list": list}
_REQUIRED = object()


def _record(*fields: tuple[str, Any]):
    """Class decorator: give a class an ``__init__`` over ``fields``.

    A default given as the string ``"dict"`` or ``"list"`` means a fresh empty
    container per instance.  The ``__init__`` is generated once so that
    construction costs what a hand-written one would.
    """

    def wrap(cls):
        all_fields = [f for base in reversed(cls.__mro__[1:]) for f in getattr(base, "_fields_spec", ())]
        all_fields += list(fields)
        params, body, namespace = [], [], {}
        for index, (name, default) in enumerate(all_fields):
            if default is _REQUIRED:
                params.append(name)
                body.append(f"    self.{name} = {name}")
            elif isinstance(default, str) and default in _MUTABLE_DEFAULTS:
                params.append(f"{name}=None")
                namespace[f"_factory{index}"] = _MUTABLE_DEFAULTS[default]
                body.append(f"    self.{name} = _factory{index}() if {name} is None else {name}")
            else:
                namespace[f"_default{index}"] = default
                params.append(f"{name}=_default{index}")
                body.append(f"    self.{name} = {name}")
        source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass")
        exec(source, namespace)  # noqa: S102 - generated from the literal field list above
        cls.__init__ = namespace["__init__"]
        cls._fields_spec = tuple(all_fields)
        cls.__match_args__ = tuple(name for name, _ in all_fields)
        return cls

    return wrap





class _Record:
    _fields_spec: tuple = ()

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self._fields_spec)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n, _ in self._fields_spec)

    __hash__ = None  # type: ignore[assignment]


# ── Actions ─────────────────────────────────────────────────────


@_record(("message", _REQUIRED))
class BlockAction(_Record):
    """Return from ``pre_tool_call`` to abort the call with ``message``."""


@_record(("text", _REQUIRED))
class RewriteAction(_Record):
    """Return from ``pre_gateway_dispatch`` to replace the inbound text."""


@_record(("reason", ""))
class SkipAction(_Record):
    """Return from ``pre_gateway_dispatch`` to drop the inbound message."""


# ── Contexts ────────────────────────────────────────────────────


@_record(("session_id", ""), ("task_id", ""))
class HookContext(_Record):
    """Fields every event's context has."""


@_record(
    ("tool_name", ""),
    ("params", "dict"),
    ("tool_call_id", ""),
    ("result", None),
    ("duration_ms", 0.0),
    ("success", None),
)
class ToolHookContext(HookContext):
    """pre/post_tool_call, transform_tool_result, transform_terminal_output."""


@_record(
    ("model", ""),
    ("messages", "list"),
    ("tools", "list"),
    ("system", ""),
    ("user_message", ""),
    ("response", None),
    ("assistant_message", ""),
    ("usage", "dict"),
    ("truncated", False),
    ("interrupted", False),
)
class LLMHookContext(HookContext):
    """pre/post_llm_call and pre/post_api_request."""


@_record(("model", ""), ("platform", ""), ("completed", True), ("interrupted", False))
class SessionHookContext(HookContext):
    """on_session_start/end/finalize/reset."""


@_record(("subagent_id", ""), ("reason", ""))
class SubagentStopContext(HookContext):
    """subagent_stop."""


@_record(("event", None), ("gateway", None), ("session_store", None))
class GatewayDispatchContext(HookContext):
    """pre_gateway_dispatch: ``event`` is the inbound message."""


__all__ = [
    "VALID_EVENTS",
    "BlockAction",
    "RewriteAction",
    "SkipAction",
    "HookContext",
    "ToolHookContext",
    "LLMHookContext",
    "SessionHookContext",
    "SubagentStopContext",
    "GatewayDispatchContext",
]
