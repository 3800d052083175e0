"""A Hermes model-provider plugin through the installed wheel's `Agent`
(issue 52 item 1): `plughost.Agent(host, model="stubcloud:stub-large")`
calls the profile's base URL (an OpenAI-compatible stub on loopback) with
its headers and the key of its first set variable."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import plughost

NO_BUNDLED = ["command-guard", "disk-cleanup", "tool-audit"]

PROVIDER = '''
from providers import register_provider
from providers.base import ProviderProfile

register_provider(ProviderProfile(
    name="stubcloud",
    env_vars=("STUBCLOUD_API_KEY",),
    base_url="{url}",
    default_headers={{"X-Title": "plughost-wheel"}},
    fallback_models=("stub-large",),
))
'''


class _Stub(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        chunk = {"choices": [{"index": 0, "delta": {"content": "wheel via stubcloud"}, "finish_reason": None}]}
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        payload = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Stub.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def _home(tmp_path: Path, url: str) -> Path:
    home = tmp_path / "home"
    plugin = home / "plugins" / "stubcloud"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: stubcloud\nkind: model-provider\nversion: 1.0.0\n")
    (plugin / "__init__.py").write_text(PROVIDER.format(url=url))
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["stubcloud"]}}))
    return home


def test_agent_uses_a_plugins_model_provider(tmp_path, stub, monkeypatch):
    monkeypatch.setenv("STUBCLOUD_API_KEY", "sk-wheel")
    host = plughost.Host(home=_home(tmp_path, stub), disable=NO_BUNDLED)
    agent = plughost.Agent(host, model="stubcloud:stub-large")

    async def turn():
        return await agent.run("hi", session_id="provider-wheel")

    report = asyncio.run(turn())
    assert report["completed"] is True, report
    assert report["reply"] == "wheel via stubcloud", report
    seen = _Stub.seen[-1]
    assert seen["body"]["model"] == "stub-large"
    assert seen["headers"]["authorization"] == "Bearer sk-wheel"
    assert seen["headers"]["x-title"] == "plughost-wheel"


def test_agent_refuses_a_provider_whose_key_is_unset(tmp_path, stub, monkeypatch):
    monkeypatch.delenv("STUBCLOUD_API_KEY", raising=False)
    host = plughost.Host(home=_home(tmp_path, stub), disable=NO_BUNDLED)
    with pytest.raises(plughost.ConfigError, match="needs its key: set STUBCLOUD_API_KEY"):
        plughost.Agent(host, model="stubcloud:stub-large")


FELIX_PROVIDER = '''
import os
from felix_ai.types import ChatMessage, ModelChatResult, TokenUsage


class EchoClient:
    def __init__(self, model_id, route):
        self.model_id, self.route = model_id, route

    async def chat(self, messages, tools, opts=None):
        text = f"echo[{self.route.provider}:{self.route.model}] {messages[-1].content} pid={os.getpid()}"
        return ModelChatResult(message=ChatMessage(role="assistant", content=text),
                               usage=TokenUsage(input=5, output=3))


def register(registry):
    registry.register_model_provider("example-echo", lambda m, route, spec, settings: EchoClient(m, route))
'''


def _felix_home(tmp_path: Path) -> Path:
    """A Felix source tree (`pyproject.toml` naming its entry point) whose
    plugin registers a model provider, as Felix's example plugin does."""
    home = tmp_path / "home"
    tree = home / "plugins" / "felix-echo"
    package = tree / "src" / "felix_echo_model"
    package.mkdir(parents=True)
    (tree / "pyproject.toml").write_text(
        '[project]\nname = "felix-echo"\nversion = "0.1.0"\n\n'
        '[project.entry-points."felix.plugins"]\necho = "felix_echo_model:register"\n'
    )
    (package / "__init__.py").write_text(FELIX_PROVIDER)
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["echo"]}}))
    return home


def test_agent_uses_a_felix_model_provider_from_asyncio_and_from_a_thread(tmp_path):
    host = plughost.Host(home=_felix_home(tmp_path), disable=NO_BUNDLED)
    agent = plughost.Agent(host, model="example-echo:echo-1")

    report = asyncio.run(agent.run("hi", session_id="felix-wheel"))
    assert report["completed"] is True, report
    assert report["reply"].startswith("echo[example-echo:echo-1] hi pid="), report

    answers: list = []
    worker = threading.Thread(target=lambda: answers.append(asyncio.run(agent.run("again", session_id="felix-thread"))))
    worker.start()
    worker.join(timeout=60)
    assert answers and answers[0]["reply"].startswith("echo[example-echo:echo-1] again"), answers
