"""plughost's Python API against the pure-Python reference host, side by side.

Run with the interpreter plughost is installed in (e.g. after
`bash tests/run_all.sh`: `.venv-test/bin/python benches/python_api.py`).
Same plugin for both (one no-op hook on each tool hook), bundled plugins
disabled. Baseline: the pure-Python reference host *without* schema
validation (what a user would write instead of plughost; plughost still
validates). Prints, in one run, per-call times and ratios for
`host.call_tool` (sync handler), `await host.acall_tool` (async handler that
does not suspend), and the wall time of 1,000 concurrent `acall_tool`s that
each sleep 50 ms against `asyncio.gather` over the same coroutines.
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
import asyncio

def register(ctx):
    def sync_noop(x: int = 0):
        return "ok"
    async def async_noop(x: int = 0):
        return "ok"
    async def sleep50():
        await asyncio.sleep(0.05)
        return "slept"
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    ctx.register_tool("sync_noop", schema, sync_noop)
    ctx.register_tool("async_noop", schema, async_noop)
    ctx.register_tool("sleep50", {}, sleep50)
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

    # Per-call times: the variants alternate over several rounds and each
    # keeps its best round, so a burst of noise on this shared machine hits
    # one round of one variant, not the ratio.
    rounds = int(os.environ.get("PLUGHOST_BENCH_ROUNDS", "5"))
    per_round = max(1, calls // rounds)

    def timed_sync() -> float:
        args = {"x": 1}
        start = time.perf_counter()
        for _ in range(per_round):
            host.call_tool("sync_noop", args)
        return (time.perf_counter() - start) / per_round

    async def timed_async(call) -> float:
        start = time.perf_counter()
        for _ in range(per_round):
            await call()
        return (time.perf_counter() - start) / per_round

    async def concurrent_ours(count: int) -> float:
        start = time.perf_counter()
        results = await asyncio.gather(*(host.acall_tool("sleep50") for _ in range(count)))
        assert results == ["slept"] * count
        return time.perf_counter() - start

    async def concurrent_gather(count: int) -> float:
        handler = ref_nv.ctx.tools["sleep50"][0]
        start = time.perf_counter()
        await asyncio.gather(*(handler() for _ in range(count)))
        return time.perf_counter() - start

    # The reference hosts load the same plugin through the flowly modules
    # plughost installed (identical classes for both): the baseline without
    # validation, and one with jsonschema validation (if installed) for scale.
    reference_host._VALIDATE = False
    ref_nv = reference_host.ReferenceHost(reference_host.load(str(plugin)))
    reference_host._VALIDATE = True
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        reference_host._VALIDATE = False
    validated = reference_host._VALIDATE
    ref = reference_host.ReferenceHost(reference_host.load(str(plugin)))

    variants = {
        "ours_sync": timed_sync,
        "ours_async": lambda: asyncio.run(timed_async(lambda: host.acall_tool("async_noop", {"x": 1}))),
        "nv_sync": lambda: asyncio.run(timed_async(lambda: ref_nv.call_tool("sync_noop", {"x": 1}))),
        "nv_async": lambda: asyncio.run(timed_async(lambda: ref_nv.call_tool("async_noop", {"x": 1}))),
        "v_sync": lambda: asyncio.run(timed_async(lambda: ref.call_tool("sync_noop", {"x": 1}))),
        "ours_conc": lambda: asyncio.run(concurrent_ours(1000)),
        "gather_conc": lambda: asyncio.run(concurrent_gather(1000)),
    }
    for measure in variants.values():  # warm-up
        measure()
    best = {name: measure() for name, measure in variants.items()}
    for _ in range(rounds - 1):
        for name, measure in variants.items():
            best[name] = min(best[name], measure())
    ours_sync, ours_async = best["ours_sync"], best["ours_async"]
    nv_sync, nv_async, v_sync = best["nv_sync"], best["nv_async"], best["v_sync"]
    ours_conc, gather_conc = best["ours_conc"], best["gather_conc"]

    us = lambda s: f"{s * 1e6:8.2f} µs"  # noqa: E731
    ms = lambda s: f"{s * 1e3:8.1f} ms"  # noqa: E731

    def line(label: str, ours: float, base: float, target: float, fmt=us) -> None:
        ratio = ours / base
        verdict = "met" if ratio <= target else "MISSED"
        print(f"  {label:<40} {fmt(ours)}   baseline {fmt(base)}   ratio {ratio:.2f}× (target ≤ {target}×: {verdict})")

    print(f"Python API vs the pure-Python reference host without validation ({calls} calls; plughost validates)")
    line("host.call_tool (sync handler)", ours_sync, nv_sync, 1.0)
    line("await host.acall_tool (async, no suspend)", ours_async, nv_async, 1.0)
    line("1,000 concurrent 50 ms acall_tool", ours_conc, gather_conc, 1.2, ms)
    if validated:
        print(f"  (reference host with jsonschema validation: sync {us(v_sync)} → ratio {ours_sync / v_sync:.2f}×)")


if __name__ == "__main__":
    main()
