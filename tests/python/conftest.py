"""Fixtures for the pytest suite, which runs against the installed wheel."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _parity_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PLUGHOST_TEST_ISOLATE=all`` (issue 47): every ``plughost.Host`` a
    test makes runs every plugin in a worker (``PLUGHOST_ISOLATE=all``, what
    a ``Host`` without ``isolate=`` follows), so ``bash tests/run_all.sh``
    runs the wheel's plugin cases a second time isolated."""
    if os.environ.get("PLUGHOST_TEST_ISOLATE") == "all":
        monkeypatch.setenv("PLUGHOST_ISOLATE", "all")


def in_process_only(why: str) -> None:
    """A case that can only run in-process: under the parity switch it is
    skipped, saying so by name (counted skipped, never a silent pass)."""
    if os.environ.get("PLUGHOST_TEST_ISOLATE") == "all":
        pytest.skip(f"in-process only: {why}")


def write_plugin(root: Path, name: str, source: str, manifest: str | None = None) -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plugin.yaml").write_text(manifest or f"name: {name}\nversion: 0.1.0\n")
    (directory / "__init__.py").write_text(textwrap.dedent(source))
    return directory


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with one enabled user plugin, `demo`."""
    home = tmp_path / "home"
    write_plugin(
        home / "plugins",
        "demo",
        """
        import asyncio
        from flowly.agent.hooks import BlockAction

        def register(ctx):
            def greet(name: str) -> str:
                return f"Hello, {name}!"
            async def nap(seconds: float = 0.2):
                await asyncio.sleep(seconds)
                return f"napped {seconds}"
            ctx.register_tool("greet", {"parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}, greet, description="Greet someone")
            ctx.register_tool("nap", {"type": "object", "properties": {"seconds": {"type": "number"}}}, nap)
            ctx.register_tool("boom", {}, lambda: 1 / 0)
            async def which_loop():
                await asyncio.sleep(0.01)
                return str(id(asyncio.get_running_loop()))
            ctx.register_tool("which_loop", {}, which_loop)
            ctx.register_hook("pre_tool_call", lambda c: BlockAction("not Mallory") if c.params.get("name") == "Mallory" else None)
            ctx.register_command("ping", lambda args: "pong " + args if args else "pong", description="Round trip")
            ctx.register_skill("guide", "SKILL.md", description="A guide")
        """,
    )
    (home / "plugins" / "demo" / "SKILL.md").write_text("# Guide\n")
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["demo"]}}))
    return home
