"""The FastAPI peer of ``plughost serve``'s ``/v1/chat/completions`` (issue 26 item 1).

Small and fair: the same plugin directory loaded through the reference
host's Flowly-style registry (``reference_host.py``: JSON Schema validation,
hooks, keyword arguments), the same scripted model (first iteration: one
``greet`` call with ``{"name": "Ada"}``; second: ``Done: {tool_results}``),
an agent loop that keeps the message list as an agent does, and uvicorn's
defaults (one process, its default loop and HTTP parser).

Run: python chat_peer.py PLUGIN_DIR COMPAT_DIR PORT
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path[:0] = [sys.argv[2], os.path.dirname(os.path.abspath(__file__))]

import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402

import reference_host  # noqa: E402

host = reference_host.ReferenceHost(reference_host.load(sys.argv[1]))
app = FastAPI()
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in host.ctx.tools]


def scripted(messages, tools):
    """The scripted model: a tool call, then the answer quoting its results."""
    if messages[-1]["role"] == "user":
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "greet", "arguments": json.dumps({"name": "Ada"})}}]}
    results = "\n".join(m["content"] for m in messages if m["role"] == "tool")
    return {"role": "assistant", "content": f"Done: {results}"}


@app.post("/v1/chat/completions")
async def chat(request: Request):
    body = await request.json()
    messages = [{"role": m["role"], "content": m.get("content") or ""} for m in body["messages"]]
    for _ in range(10):
        reply = scripted(messages, TOOLS)
        messages.append(reply)
        if not reply.get("tool_calls"):
            break
        for call in reply["tool_calls"]:
            fn = call["function"]
            result = await host.call_tool(fn["name"], json.loads(fn["arguments"]), "api")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return {
        "id": "chatcmpl-peer", "object": "chat.completion", "created": int(time.time()), "model": "peer",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": messages[-1]["content"]}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]))
