"""Hermes providers through the installed wheel's `Agent` (issue 22): a
memory provider written in Hermes's shape (`agent.memory_provider.MemoryProvider`
under `$HERMES_HOME/plugins/memory/`, selected by `memory.provider` in
Hermes's config.yaml) and a tool of an MCP server (written with the official
`mcp` package, named by `mcp_servers` in plughost's config.json), both in one
agent turn with the scripted model: the recall is fenced into the user
message the model gets, the provider's tool and the MCP tool are dispatched,
and the provider is synced after the turn.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

import plughost
from conftest import in_process_only

PROVIDER = """
import json, os
from agent.memory_provider import MemoryProvider

def _log(event, **fields):
    with open(os.environ["MEM_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\\n")

class Recall(MemoryProvider):
    name = "wheelrecall"

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        _log("initialize", session_id=session_id)

    def prefetch(self, query, *, session_id=""):
        _log("prefetch", query=query)
        return "the user likes genmaicha"

    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None):
        _log("sync_turn", user=user_content, assistant=assistant_content)

    def get_tool_schemas(self):
        return [{"name": "wheelrecall_store", "description": "Store a fact",
                 "parameters": {"type": "object", "properties": {"fact": {"type": "string"}},
                                "required": ["fact"]}}]

    def handle_tool_call(self, tool_name, args, **kwargs):
        _log("tool", tool=tool_name)
        return json.dumps({"stored": args["fact"]})

def register(ctx):
    ctx.register_memory_provider(Recall())
"""

SERVER = """
try:  # mcp 2.x renamed FastMCP
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("wheeltest")

@server.tool()
def reverse(text: str) -> str:
    \"\"\"Reverse a text.\"\"\"
    return text[::-1]

server.run("stdio")
"""

SCRIPT = """
turns:
  - tool_calls:
      - name: wheelrecall_store
        args: {fact: "genmaicha"}
      - name: mcp_wheel_reverse
        args: {text: "abc"}
  - say: "done: {tool_results}"
"""

NO_BUNDLED = ["command-guard", "disk-cleanup", "tool-audit"]


@pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="the official mcp package is not installed")
def test_a_memory_provider_and_an_mcp_tool_in_one_agent_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_process_only("an isolated memory provider's prefetched context does not reach the user message yet (docs/isolation.md, parity gaps)")
    hermes = tmp_path / "hermes"
    plugin = hermes / "plugins" / "memory" / "wheelrecall"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: wheelrecall\nversion: 0.1.0\n")
    (plugin / "__init__.py").write_text(textwrap.dedent(PROVIDER))
    (hermes / "config.yaml").write_text("memory:\n  provider: wheelrecall\n")
    server = tmp_path / "server.py"
    server.write_text(textwrap.dedent(SERVER))
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(
        json.dumps({"mcp_servers": {"wheel": {"command": sys.executable, "args": [str(server)]}}})
    )
    log = tmp_path / "mem.log"
    monkeypatch.setenv("HERMES_HOME", str(hermes))
    monkeypatch.setenv("MEM_LOG", str(log))
    monkeypatch.delenv("PLUGHOST_LOG", raising=False)
    script = tmp_path / "turn.yaml"
    script.write_text(SCRIPT)

    host = plughost.Host(home=home, disable=NO_BUNDLED)
    agent = plughost.Agent(host, model=f"scripted:{script}")

    async def turn() -> plughost.TurnReport:
        return await agent.run("remember my favourite tea", session_id="providers-wheel")

    report = asyncio.run(turn())
    assert report["completed"] is True, report
    calls = {c["name"]: c for c in report["tool_calls"]}
    assert calls["wheelrecall_store"]["outcome"] == "ok", report["tool_calls"]
    assert json.loads(calls["wheelrecall_store"]["result"]) == {"stored": "genmaicha"}
    assert calls["mcp_wheel_reverse"]["outcome"] == "ok", report["tool_calls"]
    assert "cba" in calls["mcp_wheel_reverse"]["result"]

    first = report["model_calls"][0]
    user = next(m for m in first["messages"] if m["role"] == "user")["content"]
    assert user.startswith("remember my favourite tea\n\n<memory-context>"), user
    assert "the user likes genmaicha" in user

    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert events[:4] == ["initialize", "prefetch", "tool", "sync_turn"], events


ENGINE = """
import json, os
from agent.context_engine import ContextEngine

def _log(event, **fields):
    with open(os.environ["CE_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\\n")

class WheelSquash(ContextEngine):
    name = "wheelsquash"

    def update_from_response(self, usage):
        _log("usage")

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False):
        _log("compress", count=len(messages), force=force)
        return [{"role": "user", "content": "[squashed]"}] + messages[-2:]

    def get_tool_schemas(self):
        return [{"name": "wheelsquash_status", "description": "Engine status",
                 "parameters": {"type": "object", "properties": {}}}]

    def handle_tool_call(self, name, args, **kwargs):
        _log("tool", name=name)
        return json.dumps({"engine": self.name})

def register(ctx):
    ctx.register_context_engine(WheelSquash())
"""

ENGINE_SCRIPT = """
turns:
  - tool_calls:
      - name: wheelsquash_status
        args: {}
  - say: "status: {tool_results}"
  - say: a2
  - say: a3
  - say: a4
  - say: a5
"""


def test_a_context_engine_replaces_compact_through_the_wheels_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hermes = tmp_path / "hermes"
    plugin = hermes / "plugins" / "wheelsquash"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: wheelsquash\nversion: 0.1.0\n")
    (plugin / "__init__.py").write_text(textwrap.dedent(ENGINE))
    (hermes / "config.yaml").write_text("plugins:\n  enabled: [wheelsquash]\ncontext:\n  engine: wheelsquash\n")
    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "ce.log"
    monkeypatch.setenv("HERMES_HOME", str(hermes))
    monkeypatch.setenv("CE_LOG", str(log))
    monkeypatch.delenv("PLUGHOST_LOG", raising=False)
    script = tmp_path / "turns.yaml"
    script.write_text(ENGINE_SCRIPT)

    host = plughost.Host(home=home, disable=NO_BUNDLED)
    agent = plughost.Agent(host, model=f"scripted:{script}")

    async def conversation() -> list:
        reports = [await agent.run(text, session_id="engine-wheel") for text in ["one", "two", "three", "four", "five"]]
        reports.append(await agent.run("/compact", session_id="engine-wheel"))
        return reports

    reports = asyncio.run(conversation())
    assert reports[0]["reply"] == 'status: {"engine": "wheelsquash"}', reports[0]
    assert "with the context engine: 12 message(s) became 3" in reports[-1]["reply"], reports[-1]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    names = [e["event"] for e in events]
    assert names.count("usage") == 6, names
    compress = next(e for e in events if e["event"] == "compress")
    assert compress == {"event": "compress", "count": 12, "force": True}, compress
