"""Hook actions and contexts of the Flowly plugin API (plughost compat).

Field names, defaults and order follow the Flowly API so that plugins can
construct, read and write them exactly as they do under Flowly.  The classes
are plain records (not dataclasses) to keep interpreter start-up cheap; they
support keyword and positional construction, ``repr`` and ``==``.
"""

from __future__ import annotations


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

def _record(*fields: str):
    """Class decorator: note a class's fields (its own after its bases').

    ``repr``, ``==`` and ``match`` read them; each class writes its
    ``__init__`` out by hand (generating it with ``exec`` compiled nine
    functions at every start that loads a Flowly plugin, about 1 ms).
    """

    def wrap(cls):
        all_fields = [f for base in reversed(cls.__mro__[1:]) for f in getattr(base, "_fields_spec", ())]
        all_fields += list(fields)
        cls._fields_spec = tuple(all_fields)
        cls.__match_args__ = tuple(all_fields)
        return cls

    return wrap


class _Record:
    _fields_spec: tuple = ()

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields_spec)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields_spec)

    __hash__ = None  # type: ignore[assignment]


# ── Actions ─────────────────────────────────────────────────────


@_record("message")
class BlockAction(_Record):
    """Return from ``pre_tool_call`` to abort the call with ``message``."""

    def __init__(self, message):
        self.message = message


@_record("text")
class RewriteAction(_Record):
    """Return from ``pre_gateway_dispatch`` to replace the inbound text."""

    def __init__(self, text):
        self.text = text


@_record("reason")
class SkipAction(_Record):
    """Return from ``pre_gateway_dispatch`` to drop the inbound message."""

    def __init__(self, reason=""):
        self.reason = reason


# ── Contexts ────────────────────────────────────────────────────


@_record("session_id", "task_id")
class HookContext(_Record):
    """Fields every event's context has."""

    def __init__(self, session_id="", task_id=""):
        self.session_id = session_id
        self.task_id = task_id


@_record("tool_name", "params", "tool_call_id", "result", "duration_ms", "success")
class ToolHookContext(HookContext):
    """pre/post_tool_call, transform_tool_result, transform_terminal_output."""

    def __init__(
        self,
        session_id="",
        task_id="",
        tool_name="",
        params=None,
        tool_call_id="",
        result=None,
        duration_ms=0.0,
        success=None,
    ):
        self.session_id = session_id
        self.task_id = task_id
        self.tool_name = tool_name
        self.params = {} if params is None else params
        self.tool_call_id = tool_call_id
        self.result = result
        self.duration_ms = duration_ms
        self.success = success


@_record(
    "model",
    "messages",
    "tools",
    "system",
    "user_message",
    "response",
    "assistant_message",
    "usage",
    "truncated",
    "interrupted",
)
class LLMHookContext(HookContext):
    """pre/post_llm_call and pre/post_api_request."""

    def __init__(
        self,
        session_id="",
        task_id="",
        model="",
        messages=None,
        tools=None,
        system="",
        user_message="",
        response=None,
        assistant_message="",
        usage=None,
        truncated=False,
        interrupted=False,
    ):
        self.session_id = session_id
        self.task_id = task_id
        self.model = model
        self.messages = [] if messages is None else messages
        self.tools = [] if tools is None else tools
        self.system = system
        self.user_message = user_message
        self.response = response
        self.assistant_message = assistant_message
        self.usage = {} if usage is None else usage
        self.truncated = truncated
        self.interrupted = interrupted


@_record("model", "platform", "completed", "interrupted")
class SessionHookContext(HookContext):
    """on_session_start/end/finalize/reset."""

    def __init__(self, session_id="", task_id="", model="", platform="", completed=True, interrupted=False):
        self.session_id = session_id
        self.task_id = task_id
        self.model = model
        self.platform = platform
        self.completed = completed
        self.interrupted = interrupted


@_record("subagent_id", "reason")
class SubagentStopContext(HookContext):
    """subagent_stop."""

    def __init__(self, session_id="", task_id="", subagent_id="", reason=""):
        self.session_id = session_id
        self.task_id = task_id
        self.subagent_id = subagent_id
        self.reason = reason


@_record("event", "gateway", "session_store")
class GatewayDispatchContext(HookContext):
    """pre_gateway_dispatch: ``event`` is the inbound message."""

    def __init__(self, session_id="", task_id="", event=None, gateway=None, session_store=None):
        self.session_id = session_id
        self.task_id = task_id
        self.event = event
        self.gateway = gateway
        self.session_store = session_store


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
