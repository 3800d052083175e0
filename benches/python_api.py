"""plughost's Python API against the pure-Python reference host, side by side.

Run with the interpreter plughost is installed in (e.g. after
`bash tests/run_all.sh`: `.venv-test/bin/python benches/python_api.py`).
Same plugin for both (one no-op hook on each tool hook); prints per-call
times and ratios for `host.call_tool` (sync) and `await host.acall_tool`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import plughost

sys.path.insert(0, os.path.dirname(__file__))
import reference_host  # noqa: E402  (the same file the Rust benchmark runs)

PLUGIN = """
def register(ctx):
    def sync_noop(x: int = 0):
        return "ok"
    async def async_noop(x: int = 0):
        return "ok"
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    ctx.register_tool("sync_noop", schema, sync_noop)
    ctx.register_tool("async_noop", schema, async_noop)
    ctx.register_hook("pre_tool_call", lambda c: None)
    ctx.register_hook("post_tool_call", lambda c: None)
    ctx.register_hook("transform_tool_result", lambda c: None)
"""


def main() -> None:
    calls = int(os.environ.get("PLUGHOST_BENCH_CALLS", "20000"))
    work = Path(tempfile.mkdtemp())
    plugin = work / "home" / "plugins" / "bench"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: bench\n")
    (plugin / "__init__.py").write_text(PLUGIN)
    (work / "home" / "config.json").write_text(json.dumps({"plugins": {"enabled": ["bench"]}}))
    host = plughost.Host(home=work / "home", disable=["command-guard", "disk-cleanup", "tool-audit"])
    assert host.call_tool("sync_noop", {"x": 1}) == "ok"

    # The reference host loads the same plugin through the flowly modules
    # plughost installed (identical classes for both).
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        reference_host._VALIDATE = False
    ref = reference_host.ReferenceHost(reference_host.load(str(plugin)))

    def timed_sync() -> float:
        args = {"x": 1}
        for _ in range(1000):
            host.call_tool("sync_noop", args)
        start = time.perf_counter()
        for _ in range(calls):
            host.call_tool("sync_noop", args)
        return (time.perf_counter() - start) / calls

    async def timed_async(call) -> float:
        for _ in range(1000):
            await call()
        start = time.perf_counter()
        for _ in range(calls):
            await call()
        return (time.perf_counter() - start) / calls

    ours_sync = timed_sync()
    ours_async = asyncio.run(timed_async(lambda: host.acall_tool("async_noop", {"x": 1})))
    ref_sync = asyncio.run(timed_async(lambda: ref.call_tool("sync_noop", {"x": 1})))
    ref_async = asyncio.run(timed_async(lambda: ref.call_tool("async_noop", {"x": 1})))
    validated = reference_host._VALIDATE
    reference_host._VALIDATE = False
    ref_nv = reference_host.ReferenceHost(reference_host.load(str(plugin)))
    ref_nv_sync = asyncio.run(timed_async(lambda: ref_nv.call_tool("sync_noop", {"x": 1})))

    us = lambda s: f"{s * 1e6:8.2f} µs"  # noqa: E731
    print(f"Python API vs the pure-Python reference host ({calls} calls; validation in reference: {validated})")
    print(f"  host.call_tool (sync handler)         {us(ours_sync)}   reference {us(ref_sync)}   ratio {ours_sync / ref_sync:.3f}×")
    print(f"    … vs the reference without validation {us(ref_nv_sync)}   ratio {ours_sync / ref_nv_sync:.3f}×")
    print(f"  await host.acall_tool (async handler) {us(ours_async)}   reference {us(ref_async)}   ratio {ours_async / ref_async:.3f}×")


if __name__ == "__main__":
    main()
