"""Per-call time of real Flowly's ``ToolRegistry.execute`` (the
``flowly-ai`` distribution, not plughost's compat modules), the peer of
``cargo bench --bench dispatch``'s "vs real Flowly" rows: the bench
plugin's two tools (a sync and an async no-op, through Flowly's own
``FunctionToolAdapter``, as its ``ctx.register_tool`` wraps them) with a
no-op hook on each of the three tool hooks, as plughost's side has.

Usage: PYTHON_WITH_FLOWLY_AI benches/flowly_real.py CALLS
Prints JSON: {"sync": seconds per call, "async": …, "sync_floor": the
least any host can take to run the same four Python functions (see
``floor``), "async_floor": …, "flowly": version}.
"""

import asyncio
import json
import sys
import time
from importlib.metadata import version

from flowly.agent.hooks import HookRegistry
from flowly.agent.tools.registry import ToolRegistry
from flowly.plugins.adapter import FunctionToolAdapter


def sync_noop(x: int = 0):
    return "ok"


async def async_noop(x: int = 0):
    return "ok"


SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}


def registry() -> ToolRegistry:
    hooks = HookRegistry()
    hooks.register("pre_tool_call", lambda c: None)
    hooks.register("post_tool_call", lambda c: None)
    hooks.register("transform_tool_result", lambda c: None)
    tools = ToolRegistry(hooks)
    for name, fn in (("sync_noop", sync_noop), ("async_noop", async_noop)):
        tools.register(FunctionToolAdapter(name=name, schema=SCHEMA, handler=fn))
    return tools


async def per_call(tools: ToolRegistry, name: str, calls: int) -> float:
    args = {"x": 1}
    for _ in range(min(calls, 1000)):
        assert await tools.execute(name, dict(args)) == "ok"
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            await tools.execute(name, dict(args))
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def floor(name: str, calls: int) -> float:
    """The least any host does to run the plugin's four functions as Flowly
    plugins expect them run: a ``ToolHookContext`` (Flowly's own class) for
    the hooks, the three hooks called with it, and the handler called with
    the arguments as keywords (a coroutine stepped once: no event loop, no
    task). No lookup, no validation, no dispatch, no awaits of hooks: a lower
    bound on every host, plughost's included."""
    from flowly.agent.hooks import ToolHookContext

    hooks = [lambda c: None, lambda c: None, lambda c: None]
    pre, post, transform = hooks
    handler = sync_noop if name == "sync_noop" else async_noop
    args = {"x": 1}
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            params = dict(args)
            ctx = ToolHookContext(tool_name=name, params=params, session_id=None)
            pre(ctx)
            result = handler(**params)
            if name != "sync_noop":
                try:
                    result.send(None)
                except StopIteration as done:
                    result = done.value
            ctx.result = result
            post(ctx)
            transform(ctx)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


async def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    tools = registry()
    print(
        json.dumps(
            {
                "sync": await per_call(tools, "sync_noop", calls),
                "async": await per_call(tools, "async_noop", calls),
                "sync_floor": floor("sync_noop", calls),
                "async_floor": floor("async_noop", calls),
                "flowly": version("flowly-ai"),
            }
        )
    )


asyncio.run(main())
