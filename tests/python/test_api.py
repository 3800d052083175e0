"""The Python API of the installed wheel: plughost.Host and plughost.Agent."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import in_process_only, write_plugin

import plughost


def test_plugins_and_tools_lists(home: Path) -> None:
    host = plughost.Host(home=home)
    plugins = {p["key"]: p for p in host.plugins()}
    demo = plugins["demo"]
    for field in ("key", "name", "version", "description", "author", "source", "kind", "enabled", "error", "tools", "hooks", "commands", "skills"):
        assert field in demo
    assert demo["source"] == "user" and demo["enabled"] and demo["error"] is None
    assert demo["skills"] == ["demo:guide"]
    assert {"command-guard", "disk-cleanup", "tool-audit"} <= set(plugins), "bundled plugins ship in the wheel"
    tools = {t["name"]: t for t in host.tools()}
    assert tools["greet"]["description"] == "Greet someone"
    assert tools["greet"]["parameters"]["required"] == ["name"]
    assert tools["greet"]["plugin"] == "demo"


def test_plugins_show_their_lock_entry_as_the_cli_does(home: Path, tmp_path: Path) -> None:
    source = write_plugin(tmp_path / "src", "pinned", "def register(ctx):\n    pass\n", "name: pinned\nversion: 1.0.0\n")
    subprocess.run(
        [sys.executable, "-m", "plughost", "--home", str(home), "plugins", "install", str(source)],
        check=True,
        capture_output=True,
    )
    plugins = {p["key"]: p for p in plughost.Host(home=home).plugins()}
    lock = plugins["pinned"]["lock"]
    assert lock is not None and lock["hash"].startswith("sha256:"), lock
    assert Path(lock["source"]).name == source.name and lock["version"] == "1.0.0" and not lock["editable"]
    assert plugins["demo"]["lock"] is None, "placed by hand: no entry"


def test_call_tool_runs_the_full_pipeline_and_keeps_tool_errors_as_strings(home: Path) -> None:
    host = plughost.Host(home=home)
    assert host.call_tool("greet", {"name": "Ada"}) == "Hello, Ada!"
    assert host.call_tool("greet", {"name": "Mallory"}) == "[blocked: not Mallory]"
    assert host.call_tool("boom") == "Error executing boom: division by zero"
    assert host.call_tool("missing") == "Error: Tool 'missing' not found"
    assert host.call_tool("greet", {}).startswith("Error: invalid arguments for greet:")
    assert host.call_tool("nap", {"seconds": 0.01}, session_id="s") == "napped 0.01"


def test_commands_skills_and_errors(home: Path, tmp_path: Path) -> None:
    host = plughost.Host(home=home)
    assert host.run_command("/ping hi") == "pong hi"
    assert "/ping" in host.run_command("/help")
    with pytest.raises(plughost.CommandNotFound, match="/help"):
        host.run_command("/nope")
    assert host.skill("demo:guide") == "# Guide\n"
    with pytest.raises(plughost.SkillNotFound):
        host.skill("demo:missing")
    assert issubclass(plughost.SkillNotFound, plughost.PlughostError)

    broken = tmp_path / "broken-home"
    broken.mkdir()
    (broken / "config.json").write_text("{oops")
    with pytest.raises(plughost.ConfigError, match="config.json is not valid JSON"):
        plughost.Host(home=broken).plugins()


def test_enable_and_disable_arguments(home: Path) -> None:
    write_plugin_dir = home / "plugins" / "extra"
    write_plugin_dir.mkdir()
    (write_plugin_dir / "plugin.yaml").write_text("name: extra\n")
    (write_plugin_dir / "__init__.py").write_text("def register(ctx):\n    ctx.register_tool('extra_tool', {}, lambda: 'extra')\n")
    host = plughost.Host(home=home, enable=["extra"], disable=["demo", "tool-audit"])
    plugins = {p["key"]: p for p in host.plugins()}
    assert plugins["extra"]["loaded"]
    assert plugins["demo"]["error"] == "disabled in config"
    assert host.call_tool("extra_tool") == "extra"
    assert host.call_tool("greet", {"name": "x"}) == "Error: Tool 'greet' not found"


def test_direct_registration_uses_the_plugin_context_surface(home: Path) -> None:
    host = plughost.Host(home=home)
    seen = []

    async def shout(text: str) -> str:
        return text.upper()

    host.register_tool("shout", {"type": "object", "properties": {"text": {"type": "string"}}}, shout, description="Shout")
    host.register_hook("post_tool_call", lambda ctx: seen.append((ctx.tool_name, ctx.result)))
    host.register_command("Direct Cmd", lambda args: f"direct {args}")
    assert host.call_tool("shout", {"text": "hey"}) == "HEY"
    assert ("shout", "HEY") in seen
    assert host.run_command("/direct-cmd x") == "direct x"
    assert any(t["name"] == "shout" and t["plugin"] == "python" for t in host.tools())
    with pytest.raises(plughost.PlughostError, match="register before its first use"):
        host.register_tool("late", {}, lambda: "late")
    with pytest.raises(ValueError):
        plughost.Host(home=home).register_skill("a:b", "SKILL.md")


# A barrier: each call waits until `n` calls of the same key are inside at
# once. Calls that do not overlap never fill it, so the first one gives up
# after `timeout` seconds and says so: overlap is proven, not timed.
BARRIER = """
import asyncio, time
_ROOMS = {}

async def meet(key: str, n: int, timeout: float = 60):
    room = _ROOMS.setdefault(key, {"inside": 0, "open": False})
    room["inside"] += 1
    deadline = time.monotonic() + timeout
    while not room["open"]:
        if room["inside"] >= n:
            room["open"] = True
            break
        if time.monotonic() > deadline:
            return f"alone: {room['inside']} of {n} inside"
        await asyncio.sleep(0.005)
    return f"met {n}"

def register(ctx):
    ctx.register_tool("meet", {"type": "object", "properties": {"key": {"type": "string"}, "n": {"type": "integer"}}}, meet)
"""


def test_acall_tool_from_a_running_loop_overlaps(home: Path) -> None:
    write_plugin(home / "plugins", "barrier", BARRIER)
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["demo", "barrier"]}}))
    host = plughost.Host(home=home)

    async def main() -> list[str]:
        return await asyncio.gather(*(host.acall_tool("meet", {"key": "acall", "n": 50}) for _ in range(50)))

    results = asyncio.run(main())
    assert results == ["met 50"] * 50, "the 50 calls were not all in flight at once"
    assert asyncio.run(host.acall_tool("nap", {"seconds": 0.01})) == "napped 0.01"

    async def single() -> str:
        return await host.acall_tool("greet", {"name": "loop"})

    assert asyncio.run(single()) == "Hello, loop!"


def test_plugin_coroutines_run_on_the_callers_loop_and_blocking_calls_never_deadlock_it(home: Path) -> None:
    in_process_only("an isolated plugin's coroutines run on its worker's loop, not the caller's")
    host = plughost.Host(home=home)

    async def main() -> tuple[str, str, str]:
        mine = str(id(asyncio.get_running_loop()))
        theirs = await host.acall_tool("which_loop")
        # A blocking call from inside a running loop must not wait on that loop.
        blocking = host.call_tool("nap", {"seconds": 0.05})
        return mine, theirs, blocking

    mine, theirs, blocking = asyncio.run(main())
    assert theirs == mine, "the handler's coroutine ran on the caller's loop"
    assert blocking == "napped 0.05"


def test_agent_turn_with_a_script(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls:\n"
        "      - name: greet\n"
        "        args: {name: Agent}\n"
        "  - say: 'got: {tool_results}'\n"
    )
    host = plughost.Host(home=home)
    agent = plughost.Agent(host, model=f"scripted:{script}")

    async def main() -> str:
        reply = await agent.send("hello", session_id="py-1")
        await agent.shutdown()
        return reply

    assert asyncio.run(main()) == "got: Hello, Agent!"
    transcript = (home / "sessions" / "py-1.jsonl").read_text().splitlines()
    assert json.loads(transcript[0])["content"] == "hello"


def test_agent_errors_raise_plughost_errors(home: Path) -> None:
    host = plughost.Host(home=home)
    with pytest.raises(plughost.ConfigError, match="unknown model provider"):
        plughost.Agent(host, model="nosuch:model")
    agent = plughost.Agent(host, model="openai:test", base_url="http://127.0.0.1:9/v1")

    async def turn() -> str:
        return await agent.send("hi", session_id="down")

    with pytest.raises(plughost.ModelError, match="model call failed"):
        asyncio.run(turn())


def test_the_console_script_is_on_path_and_runs_in_this_interpreter(home: Path) -> None:
    exe = shutil.which("plughost", path=os.path.dirname(sys.executable))
    assert exe, "the wheel installs a plughost console script"
    env = dict(os.environ, PLUGHOST_HOME=str(home))
    listed = subprocess.run([exe, "plugins", "list", "--json"], capture_output=True, text=True, env=env, check=True)
    assert "demo" in {p["key"] for p in json.loads(listed.stdout)}
    called = subprocess.run([exe, "tools", "call", "greet", "--args", '{"name": "CLI"}'], capture_output=True, text=True, env=env)
    assert (called.returncode, called.stdout) == (0, "Hello, CLI!\n")
    bad = subprocess.run([exe, "tools", "call", "greet", "--args", "{bad"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    version = subprocess.run([sys.executable, "-m", "plughost", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("plughost ")
    doctor = subprocess.run([exe, "plugins", "doctor", "--json"], capture_output=True, text=True, env=env)
    reported = json.loads(doctor.stdout)["python"]["executable"]
    assert os.path.realpath(os.path.dirname(reported)) == os.path.realpath(os.path.dirname(sys.executable)), reported


def test_host_register_tool_takes_flowlys_keywords(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLUGHOST_API_SURELY_UNSET", raising=False)
    host = plughost.Host(home=home)

    async def lookup(q: str) -> str:
        return f"found {q}"

    host.register_tool(
        "lookup", {"type": "object", "properties": {"q": {"type": "string"}}}, lookup,
        description="Look up", toolset="research", requires_env=["PATH"], is_async=True, emoji="🔎",
    )
    host.register_tool(
        name="gated", schema={}, handler=lambda: "ran", toolset="research",
        requires_env="PLUGHOST_API_SURELY_UNSET", emoji="",
    )
    tools = {t["name"]: t for t in host.tools()}
    assert tools["lookup"]["toolset"] == "research" and tools["lookup"]["requires_env"] == ["PATH"]
    assert tools["gated"]["requires_env"] == ["PLUGHOST_API_SURELY_UNSET"]
    assert host.call_tool("lookup", {"q": "x"}) == "found x"
    assert host.call_tool("gated") == (
        "Error: gated is unavailable: the environment variable PLUGHOST_API_SURELY_UNSET "
        "it requires (requires_env) is not set; set it to use the tool"
    )
    monkeypatch.setenv("PLUGHOST_API_SURELY_UNSET", "1")
    assert host.call_tool("gated") == "ran"


def test_host_register_tool_rejects_bad_flowly_keywords(home: Path) -> None:
    host = plughost.Host(home=home)
    with pytest.raises(TypeError, match="toolset must be a string"):
        host.register_tool("a", {}, lambda: "", toolset=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="requires_env must be a list of environment variable names"):
        host.register_tool("b", {}, lambda: "", requires_env=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        host.register_tool("c", {}, lambda: "", colour="red")  # type: ignore[call-arg]
