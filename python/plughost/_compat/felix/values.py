"""Values between plughost and Felix plugins: messages, hook arguments and answers, tool calls and their text, the startup hooks' ``app``."""

from __future__ import annotations

import types


# --- values ------------------------------------------------------------------


def to_messages(items):
    from felix_ai.types import ChatMessage, ToolCall

    out = []
    for m in items or []:
        calls = None
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                args = fn.get("arguments")
                if isinstance(args, str):
                    import json

                    try:
                        args = json.loads(args) if args.strip() else {}
                    except ValueError:
                        args = {"_raw": args}
                calls.append(ToolCall(id=c.get("id", ""), name=fn.get("name", ""), args=args or {}))
        content = m.get("content")
        out.append(
            ChatMessage(
                role=m.get("role", "user"),
                content="" if content is None else content,
                tool_call_id=m.get("tool_call_id"),
                name=m.get("name"),
                tool_calls=calls,
            )
        )
    return out


class Mistake(Exception):
    """A hook answer of the wrong shape: reported, then ignored (fail open)."""


def from_message(m) -> dict:
    from felix_ai.types import ChatMessage

    if not isinstance(m, ChatMessage) and type(m).__name__ != "ChatMessage":
        raise Mistake(f"returned something other than a ChatMessage ({type(m).__name__})")
    import json

    out = {"role": m.role, "content": m.content if m.content is not None else ""}
    if getattr(m, "tool_calls", None):
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args or {})},
            }
            for c in m.tool_calls
        ]
    if getattr(m, "tool_call_id", None):
        out["tool_call_id"] = m.tool_call_id
    if getattr(m, "name", None):
        out["name"] = m.name
    return out


STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def args_for(kind: str, payload: dict, ctx: dict) -> tuple:
    """The positional arguments of a ``kind`` hook."""
    if kind in ("filter_history", "before_turn"):
        return (to_messages(payload["messages"]), ctx)
    if kind == "before_model":
        return ({"messages": to_messages(payload["messages"]), "tools": list(payload["tools"])}, ctx)
    if kind == "after_model":
        [message] = to_messages([payload["reply"]])
        return ({"message": message, "stop_reason": STOP_REASONS.get(payload["stop_reason"], "unknown")}, ctx)
    if kind == "before_tool":
        return (dict(payload["tool_call"]), ctx)
    if kind == "after_tool":
        return (dict(payload["tool_call"]), payload["result"], payload["is_error"], ctx)
    if kind == "before_compact":
        return ({"messages": to_messages(payload["messages"]), "kept": to_messages(payload["kept"])}, ctx)
    if kind == "compact_failed":
        return ({"error": payload["error"]}, ctx)
    raise ValueError(f"unknown Felix hook kind {kind!r}")


def _shape(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def interpret(kind: str, ret):
    """A hook's answer as ``(what, value)`` for the Rust side; raises
    :class:`Mistake` for a wrong shape."""
    if ret is None:
        return ("none", None)
    if kind == "filter_history":
        if not isinstance(ret, (list, tuple)):
            raise Mistake(f"answered {_shape(ret)}, not a list of ChatMessage; the history is kept")
        return ("messages", [from_message(m) for m in ret])
    if kind == "before_turn":
        if not isinstance(ret, (list, tuple)):
            raise Mistake(f"answered {_shape(ret)}, not a list of ChatMessage to append; nothing appended")
        return ("append", [from_message(m) for m in ret])
    if kind == "before_model":
        if not isinstance(ret, dict) or "messages" not in ret:
            raise Mistake(f"answered {_shape(ret)} without a 'messages' key; the call is sent as it was")
        if not isinstance(ret["messages"], (list, tuple)):
            raise Mistake("answered a 'messages' value that is not a list; the call is sent as it was")
        return ("messages", [from_message(m) for m in ret["messages"]])
    if kind == "after_model":
        if not isinstance(ret, dict) or "message" not in ret:
            raise Mistake(f"answered {_shape(ret)} without a 'message' key; the reply is kept")
        message = from_message(ret["message"])
        if message["role"] != "assistant":
            raise Mistake(f"returned a '{message['role']}' message, not an assistant's; the reply is kept")
        return ("reply", message)
    if kind == "before_tool":
        if not isinstance(ret, dict):
            raise Mistake(f"answered {_shape(ret)}, not a dict; treated as allow")
        if "block" not in ret:
            raise Mistake(f"answered {_shape(ret)} without a 'block' key; treated as allow")
        if not ret["block"]:
            return ("none", None)
        reason = ret.get("reason") or "blocked by before_tool hook"
        return ("block", {"reason": str(reason), "terminate": bool(ret.get("terminate"))})
    if kind == "after_tool":
        if not isinstance(ret, dict):
            raise Mistake(f"answered {_shape(ret)}, not a dict; the result is kept")
        out = {}
        if "content" in ret and ret["content"] is not None:
            content = ret["content"]
            if not isinstance(content, str):
                from felix.tools.types import tool_output_content

                content = tool_output_content(content)
            out["content"] = content
        if ret.get("terminate"):
            out["terminate"] = True
        return ("merge", out)
    if kind == "before_compact":
        if not isinstance(ret, dict):
            raise Mistake(f"answered {_shape(ret)}, not a dict; compaction goes on")
        if ret.get("cancel"):
            return ("cancel", None)
        if ret.get("summary") is not None:
            return ("summary", str(ret["summary"]))
        return ("none", None)
    return ("none", None)


# --- tools ---------------------------------------------------------------------


def call_tool(tool, arguments: dict, thread_id: str, tool_call_id: str, delegate: bool):
    """Run a Felix tool as Felix's tool runner does: its executor's
    ``execute(args, ctx)`` (``define_tool``'s validates, then calls
    ``handler(parsed, ctx)`` or ``handler(parsed)``). Returns an awaitable."""
    from felix.tools.types import ToolInvocationCtx

    ctx = ToolInvocationCtx(
        manifest_id="delegate" if delegate else "main",
        tool_call_id=tool_call_id,
        thread_id=thread_id,
        signal=None,
    )
    return tool.executor.execute(arguments, ctx)


def tool_text(ret) -> "tuple[str, bool]":
    """A handler's return as ``(text, is_error)``."""
    from felix.tools.types import tool_output_content

    text = tool_output_content(ret)
    meta = ret.get("metadata") if isinstance(ret, dict) else getattr(ret, "metadata", None)
    error = isinstance(meta, dict) and bool(meta.get("is_error") or meta.get("error_code"))
    # Felix's failure tags mark a failed call whatever carried them.
    error = error or text.startswith(("[error/", "[tool error/", "[fatal/"))
    return text, error


def error_text(tool, exc) -> str:
    """``[error/<code>] <exc>`` (or ``[fatal/<code>]`` for a fatal tool)."""
    from felix.tools.errors import infer_error_code

    code = infer_error_code(exc)
    code = getattr(code, "value", code)
    tag = "fatal" if getattr(tool, "fatal", False) else "error"
    return f"[{tag}/{code}] {exc}"


class App:
    """The stand-in ``app`` startup hooks get (``felix_api.app`` awaits ``hook(app)``)."""

    def __init__(self, plugins, tools) -> None:
        self.state = types.SimpleNamespace(settings=types.SimpleNamespace(), plugins=list(plugins), tools=list(tools))
