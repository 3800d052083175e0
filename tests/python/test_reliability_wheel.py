"""Issue 27 from the wheel: the console script's `mcp` runs a third-party
plugin isolated by default (in a worker started from `sys.executable`),
and `plugins doctor` survives a plugin whose register() ends the process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import write_plugin

EXE = Path(sys.executable).with_name("plughost")


def _mcp(home: Path, *lines: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("PLUGHOST_LOG",)}
    env["PLUGHOST_BUNDLED_DIR"] = str(home / "no-bundled")
    (home / "no-bundled").mkdir(exist_ok=True)
    out = subprocess.run(
        [str(EXE), "--home", str(home), "mcp"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_the_console_scripts_mcp_isolates_a_third_party_plugin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plugin(
        home / "plugins",
        "where",
        """
        import os

        def register(ctx):
            ctx.register_tool("pids", {"type": "object"}, lambda: "%d %d" % (os.getpid(), os.getppid()))
        """,
    )
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["where"]}}))
    answers = _mcp(
        home,
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pids", "arguments": {}}}),
    )
    call = next(a for a in answers if a.get("id") == 1)
    pid, parent = (int(n) for n in call["result"]["content"][0]["text"].split())
    # In a worker: its parent is the mcp process, not this test.
    assert parent != os.getpid(), call


def test_the_console_scripts_doctor_names_a_plugin_that_ends_the_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plugin(
        home / "plugins",
        "exits",
        """
        import os

        def register(ctx):
            os._exit(9)
        """,
    )
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["exits"]}}))
    doctor = subprocess.run([str(EXE), "--home", str(home), "plugins", "doctor"], capture_output=True, text=True, timeout=60)
    assert "exits" in doctor.stdout + doctor.stderr, (doctor.stdout, doctor.stderr)
    assert doctor.stdout.strip(), doctor.stderr
