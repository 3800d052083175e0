"""A Hermes plugin through the installed wheel (issue 21's tests: from a
directory installed by the wheel's own `plughost plugins install`, then the
Python API: `plugins()`, `call_tool()` from threads and `asyncio.run`, and an
agent turn in which a Hermes `.env` guard written for Hermes's tool names
protects plughost's built-ins).

The plugin is written the way Hermes plugins are: `plugin.yaml` with Hermes's
fields, `register(ctx)` with a positional `register_tool(name, toolset,
schema, handler)`, handlers taking `(args, **kwargs)`, hooks returning
Hermes's `{"action": "block"}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import plughost

GUARD = """
import json

def shout(args, **kwargs):
    return json.dumps({"text": args["text"].upper(), "task": kwargs.get("task_id", "")})

def guard(tool_name, args, **kwargs):
    if tool_name == "read_file" and ".env" in args.get("path", ""):
        return {"action": "block", "message": "Blocked: .env files hold secrets"}
    if tool_name == "terminal" and ".env" in args.get("command", ""):
        return {"action": "block", "message": "Blocked: .env files hold secrets"}
    return None

def register(ctx):
    ctx.register_tool("__TOOL__", "__KEY__",
                      {"name": "__TOOL__", "description": "Upper-case a text",
                       "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                                      "required": ["text"]}},
                      shout)
    ctx.register_hook("pre_tool_call", guard)
"""

SCRIPT = """
turns:
  - tool_calls:
      - name: read_file
        args: {path: ".env"}
      - name: exec
        args: {command: "cat .env"}
      - name: __TOOL__
        args: {text: "quiet"}
  - say: "done"
"""

NO_BUNDLED = ["command-guard", "disk-cleanup", "tool-audit"]


def install(tmp_path: Path) -> tuple[Path, str, str]:
    """`plugins install --enable` of a Hermes plugin directory, by the wheel's console script."""
    key = f"hguard{uuid.uuid4().hex[:8]}"
    tool = f"{key}_shout"
    source = tmp_path / "src" / key
    source.mkdir(parents=True)
    (source / "plugin.yaml").write_text(f"name: {key}\nversion: 1.0.0\nrequires_hermes: '>=0.1'\nprovides_tools: [{tool}]\n")
    (source / "__init__.py").write_text(textwrap.dedent(GUARD).replace("__TOOL__", tool).replace("__KEY__", key))
    home = tmp_path / "home"
    home.mkdir()
    exe = Path(sys.executable).with_name("plughost")
    env = dict(os.environ, PLUGHOST_HOME=str(home), HERMES_HOME=str(tmp_path / "hermes"))
    env.pop("PLUGHOST_LOG", None)
    done = subprocess.run([str(exe), "plugins", "install", "--enable", str(source)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hermes" in done.stdout.lower(), "the install states the dialect it chose: " + done.stdout
    return home, key, tool


def test_a_hermes_plugin_installed_from_a_directory_works_through_the_wheel(tmp_path: Path) -> None:
    home, key, tool = install(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text("API_KEY=TOPSECRET\n")
    host = plughost.Host(home=home, disable=NO_BUNDLED, workspace=workspace)

    info = {p["key"]: p for p in host.plugins()}[key]
    assert info["dialect"] == "hermes" and info["loaded"], info

    # Direct calls: the positional registration and the (args, **kwargs) handler.
    assert json.loads(host.call_tool(tool, {"text": "hi"}))["text"] == "HI"
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(lambda i: json.loads(host.call_tool(tool, {"text": f"t{i}"}))["text"], range(8)))
    assert texts == [f"T{i}" for i in range(8)]

    async def awaited() -> str:
        return await host.acall_tool(tool, {"text": "aw"})

    assert json.loads(asyncio.run(awaited()))["text"] == "AW"

    # The guard knows Hermes's names only (read_file, terminal): it blocks
    # plughost's read_file and exec alike, and the secret never reaches the model.
    script = home / "turn.yaml"
    script.write_text(textwrap.dedent(SCRIPT).replace("__TOOL__", tool))
    agent = plughost.Agent(host, model=f"scripted:{script}")

    async def turn() -> plughost.TurnReport:
        return await agent.run("go", session_id="hermes-wheel")

    report = asyncio.run(turn())
    assert report["completed"] is True, report
    calls = [(c["name"], c["outcome"]) for c in report["tool_calls"]]
    assert calls == [("read_file", "blocked"), ("exec", "blocked"), (tool, "ok")], report["tool_calls"]
    assert "TOPSECRET" not in json.dumps(report["tool_calls"])
    assert json.loads(report["tool_calls"][2]["result"])["text"] == "QUIET"
