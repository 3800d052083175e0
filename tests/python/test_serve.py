"""`plughost mcp` and `plughost serve` against the official clients: the
Python MCP SDK over stdio and streamable HTTP, and the OpenAI SDK against
the chat completions endpoint. Everything on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

mcp = pytest.importorskip("mcp")
openai = pytest.importorskip("openai")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

KEY = "test-key-123"

PLUGIN = """
import asyncio, time
from flowly.agent.hooks import BlockAction

EVENTS = []

def register(ctx):
    def greet(name: str) -> str:
        print("noise a plugin prints on stdout")
        return f"Hello, {name}!"
    async def nap(seconds: float = 0.2, together: int = 0):
        EVENTS.append(("start", time.monotonic()))
        # With `together`, wait (up to 30 s) until that many naps have
        # started, so overlapping calls are seen to overlap however slowly
        # the second one arrives.
        deadline = time.monotonic() + 30
        while sum(k == "start" for k, _ in EVENTS) < together and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(seconds)
        EVENTS.append(("end", time.monotonic()))
        return f"napped {seconds}"
    def events() -> str:
        import json
        return json.dumps(EVENTS)
    ctx.register_tool("greet", {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}, greet, description="Greet someone")
    ctx.register_tool("nap", {"type": "object", "properties": {"seconds": {"type": "number"}, "together": {"type": "integer"}}}, nap, description="Sleep a while")
    ctx.register_tool("events", {"type": "object", "properties": {}}, events, description="What nap saw")
    ctx.register_tool("boom", {"type": "object", "properties": {}}, lambda: 1 / 0, description="Always fails")
    ctx.register_tool("hidden", {}, lambda: "x", description="Never listed", check_fn=lambda: False)
    ctx.register_tool("needs_env", {}, lambda: "x", description="Needs a variable", requires_env=["PLUGHOST_TEST_SURELY_UNSET"])
    ctx.register_hook("pre_tool_call", lambda c: BlockAction("not Mallory") if c.params.get("name") == "Mallory" else None)
    ctx.register_command("ping", lambda args: "pong " + args if args else "pong", description="Round trip")
    ctx.register_skill("guide", "SKILL.md", description="A guide")
"""

SCRIPT = """
turns:
  - say: "Let me greet."
    tool_calls:
      - name: greet
        args: {name: "Ada"}
  - say: "Done: {tool_results}"
"""


def plughost_command() -> list[str]:
    """The binary under test: PLUGHOST_BIN, else the console script the
    wheel installed beside this interpreter, else `python -m plughost`."""
    if os.environ.get("PLUGHOST_BIN"):
        return [os.environ["PLUGHOST_BIN"]]
    script = Path(sys.executable).parent / "plughost"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "plughost"]


@pytest.fixture
def serve_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    plugin = home / "plugins" / "demo"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: demo\nversion: 0.1.0\n")
    (plugin / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (plugin / "SKILL.md").write_text("# Guide\nBe kind.\n")
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["demo"]}}))
    (tmp_path / "script.yaml").write_text(SCRIPT)
    return home


def env_without_key() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PLUGHOST_API_KEY", None)
    env.pop("PLUGHOST_TEST_SURELY_UNSET", None)
    return env


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url


@pytest.fixture
def server(serve_home: Path) -> Iterator[Server]:
    cmd = plughost_command() + [
        "--home", str(serve_home), "serve", "--port", "0", "--api-key", KEY,
        "--model", "scripted", "--script", str(serve_home.parent / "script.yaml"),
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env_without_key())
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    assert url, f"plughost serve did not start (exit {proc.poll()})"
    yield Server(proc, url)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def field(obj, name: str, old_name: str):
    """A field of an MCP SDK object: snake_case since mcp 2, camelCase before."""
    return getattr(obj, name) if hasattr(obj, name) else getattr(obj, old_name)


def is_error(result) -> bool:
    return bool(field(result, "is_error", "isError"))


def text_of(result) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def exercise_mcp(session: ClientSession) -> None:
    await session.initialize()
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"greet", "nap", "boom", "events"} <= set(tools)
    assert "hidden" not in tools, "a tool whose check_fn fails is not listed"
    # Flowly stores a tool's requires_env and ignores it (gating is Hermes's
    # rule): the Flowly plugin's tool is listed with its variable unset.
    assert "needs_env" in tools, "a Flowly tool's requires_env does not gate it"
    assert tools["greet"].description == "Greet someone"
    assert field(tools["greet"], "input_schema", "inputSchema")["required"] == ["name"]

    ok = await session.call_tool("greet", {"name": "Ada"})
    assert not is_error(ok) and text_of(ok) == "Hello, Ada!"
    blocked = await session.call_tool("greet", {"name": "Mallory"})
    assert is_error(blocked) and "not Mallory" in text_of(blocked)
    failed = await session.call_tool("boom", {})
    assert is_error(failed) and text_of(failed) == "Error executing boom: division by zero"
    invalid = await session.call_tool("greet", {})
    assert is_error(invalid) and "name" in text_of(invalid)
    unknown = await session.call_tool("no_such_tool", {})
    assert is_error(unknown) and "no_such_tool" in text_of(unknown)

    # Two calls at once overlap: the second starts before the first ends.
    first, second = await asyncio.gather(
        session.call_tool("nap", {"seconds": 0.5, "together": 2}), session.call_tool("nap", {"seconds": 0.5, "together": 2})
    )
    assert text_of(first) == text_of(second) == "napped 0.5"
    events = json.loads(text_of(await session.call_tool("events", {})))
    kinds = [k for k, _ in sorted(events[-4:], key=lambda e: e[1])]
    assert kinds == ["start", "start", "end", "end"], events

    prompts = {p.name: p for p in (await session.list_prompts()).prompts}
    assert "demo:guide" in prompts and "/ping" in prompts
    guide = await session.get_prompt("demo:guide")
    assert guide.messages[0].role == "user"
    assert guide.messages[0].content.text == "# Guide\nBe kind.\n"
    ping = await session.get_prompt("/ping", {"args": "hello"})
    assert ping.messages[0].content.text == "pong hello"
    with pytest.raises(Exception, match="no prompt named"):
        await session.get_prompt("demo:nope")


def test_mcp_over_stdio(serve_home: Path) -> None:
    cmd = plughost_command()
    params = StdioServerParameters(
        command=cmd[0], args=cmd[1:] + ["--home", str(serve_home), "mcp"], env=env_without_key()
    )

    async def run() -> None:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await exercise_mcp(session)

    asyncio.run(run())


def test_mcp_over_streamable_http(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
        async with client:
            async with streamable_http_client(server.url + "/mcp", http_client=client) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await exercise_mcp(session)
                    tools = {t.name for t in (await session.list_tools()).tools}
                    assert "exec" not in tools, "the agent's built-in tools are not served over MCP"

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    # Ending the session (DELETE /mcp) answers 200, as the official servers do.
    failed = [r.getMessage() for r in caplog.records if "termination failed" in r.getMessage()]
    assert not failed, failed
    request = urllib.request.Request(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    metrics = urllib.request.urlopen(request, timeout=30).read().decode()
    for outcome, count in [("ok", 4), ("blocked", 1), ("raised", 1), ("invalid_arguments", 1), ("not_found", 1)]:
        assert f'plughost_tool_calls_total{{via="mcp",outcome="{outcome}"}} {count}' in metrics, metrics


def test_openai_client_non_streaming_with_a_tool_call(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY)
    reply = client.chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "greet Ada"}]
    )
    assert reply.choices[0].message.content == "Done: Hello, Ada!"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.total_tokens == 0
    extra = reply.model_extra["plughost"]
    assert [(c["name"], c["outcome"]) for c in extra["tool_calls"]] == [("greet", "ok")]
    models = client.models.list()
    assert [m.id for m in models.data] == ["plughost:scripted"]


def test_openai_client_streaming(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY)
    stream = client.chat.completions.create(
        model="anything",
        messages=[{"role": "user", "content": "greet Ada"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert text == "Let me greet.\n\nDone: Hello, Ada!"
    assert finish == "stop"
    assert usage is not None


def test_openai_client_wrong_key_is_401(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong")
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 401
    assert "wrong API key" in str(caught.value)


def test_openai_client_bad_request_names_the_problem(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY)
    with pytest.raises(openai.BadRequestError, match="last message must be the user's"):
        client.chat.completions.create(model="x", messages=[{"role": "assistant", "content": "hi"}])


def test_openai_client_history_and_named_session(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY)
    # A conversation with history: the scripted model is past its first turn.
    reply = client.chat.completions.create(
        model="x",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"},
        ],
    )
    assert reply.choices[0].message.content
    named = client.chat.completions.create(
        model="x",
        messages=[{"role": "user", "content": "/ping there"}],
        extra_headers={"X-Plughost-Session": "py-session"},
    )
    assert named.choices[0].message.content == "pong there"
    assert named.model_extra["plughost"]["session"] == "py-session"


def test_openai_client_concurrent_requests(server: Server) -> None:
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY)

    async def one(i: int) -> str:
        reply = await client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": f"greet {i}"}]
        )
        return reply.choices[0].message.content or ""

    async def run() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(16)))

    replies = asyncio.run(run())
    assert replies == ["Done: Hello, Ada!"] * 16


def test_serve_stops_on_sigterm(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    assert server.proc.stderr is not None
    assert "plughost serve: stopped" in server.proc.stderr.read()
