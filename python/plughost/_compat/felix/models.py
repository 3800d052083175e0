"""Felix model providers as plughost's: ``register_model_provider(name,
factory)`` (on the plugin registry or ``felix.patterns.model_registry``)
makes ``--model NAME:MODEL`` a model. Its client is built as Felix builds
it, ``factory(model_id, ModelRoute(NAME, MODEL), spec, settings)`` (once per
model; no manifest spec here, so ``None``), and each call awaits its
``chat(messages, tools, opts)`` with Felix's message types; the answer goes
back to plughost as OpenAI-shaped data (``src/dialects/felix/models.rs``).
"""

from __future__ import annotations

import json

#: (factory, model) -> the client built for it.
_CLIENTS: dict = {}

#: Felix's stop reasons as OpenAI's finish reasons.
_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


class Settings:
    """The ``settings`` a factory is given: Felix's own settings do not
    exist under plughost (its routes are ``--model``)."""

    model_routes = ""
    default_model_id = ""


class ToolSchema:
    """A tool offered to the model, as Felix's ``ToolSchema`` protocol has it."""

    def __init__(self, function: dict) -> None:
        self.name = function.get("name", "")
        self.description = function.get("description", "")
        self.raw_input_schema = function.get("parameters") or {"type": "object", "properties": {}}
        self.args_schema = self.raw_input_schema


def _messages(system, messages) -> list:
    from felix_ai.types import ChatMessage, ToolCall

    out = [ChatMessage(role="system", content=system)] if system else []
    for m in messages:
        calls = None
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                function = c.get("function") or {}
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    args = {}
                calls.append(ToolCall(id=c.get("id", ""), name=function.get("name", ""), args=args))
        out.append(ChatMessage(role=m.get("role", "user"), content=m.get("content") or "",
                               tool_call_id=m.get("tool_call_id"), name=m.get("name"), tool_calls=calls))
    return out


async def chat(factory, name: str, model: str, request: dict) -> dict:
    # Imported on use: this part is made before the compat finder is.
    from felix_ai.types import ModelChatOptions, ModelRoute

    key = (id(factory), model)
    client = _CLIENTS.get(key)
    if client is None:
        client = factory(model, ModelRoute(provider=name, model=model), None, Settings())
        _CLIENTS[key] = client
    tools = [ToolSchema(t.get("function", t)) for t in request.get("tools") or []]
    params = request.get("params") or {}
    opts = ModelChatOptions(temperature=params.get("temperature"), max_tokens=params.get("max_tokens"))
    result = await client.chat(_messages(request.get("system"), request.get("messages") or []), tools, opts)
    message = result.message
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    calls = [{"id": c.id, "name": c.name, "arguments": json.dumps(c.args or {})}
             for c in (message.tool_calls or [])]
    usage = {}
    if result.usage is not None:
        usage = {"prompt_tokens": result.usage.input, "completion_tokens": result.usage.output,
                 "total_tokens": result.usage.input + result.usage.output}
    reason = result.stop_reason or "end_turn"
    return {"text": content or "", "tool_calls": calls, "usage": usage,
            "finish_reason": _FINISH.get(reason, reason)}
