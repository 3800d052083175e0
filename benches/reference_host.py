"""The pure-Python reference host the benchmarks compare plughost against.

Same dispatch semantics as plughost's flowly dialect (and the reference
Flowly implementation): JSON Schema validation of the arguments, then
``pre_tool_call`` (first BlockAction wins), ``check_fn``, the handler with
keyword arguments (unexpected ones dropped), awaiting awaitables, result
string rules, ``post_tool_call`` and ``transform_tool_result``, all in one
asyncio loop.  It loads the same plugin directory through the same compat
``flowly`` modules.

Run: python reference_host.py PLUGIN_DIR COMPAT_DIR CALLS  → JSON on stdout.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import sys
import time


class ReferenceContext:
    def __init__(self, key):
        self.key = key
        self.tools = {}
        self.hooks = {}

    def register_tool(self, name, schema, handler, *, check_fn=None, description=""):
        params = schema.get("parameters", schema) if isinstance(schema, dict) else {}
        validator = None
        if _VALIDATE:
            import jsonschema

            validator = jsonschema.Draft202012Validator(params)
        sig = inspect.signature(handler)
        takes_all = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        self.tools[name] = (handler, check_fn, validator, None if takes_all else frozenset(sig.parameters))

    def register_hook(self, event, callback):
        self.hooks.setdefault(event, []).append(callback)

    def register_command(self, *a, **k):
        pass

    def register_skill(self, *a, **k):
        pass


_VALIDATE = True


class ReferenceHost:
    def __init__(self, ctx):
        from flowly.agent.hooks import BlockAction, ToolHookContext

        self.ctx = ctx
        self.BlockAction = BlockAction
        self.ToolHookContext = ToolHookContext

    async def fire(self, event, hook_ctx):
        results = []
        for fn in self.ctx.hooks.get(event, ()):
            try:
                ret = fn(hook_ctx)
                if ret is not None and hasattr(ret, "__await__"):
                    ret = await ret
                if ret is not None:
                    results.append(ret)
            except Exception:
                pass
        return results

    async def call_tool(self, name, params, session_id=""):
        entry = self.ctx.tools.get(name)
        if entry is None:
            return f"Error: Tool '{name}' not found"
        handler, check_fn, validator, accepted = entry
        if validator is not None:
            error = next(validator.iter_errors(params), None)
            if error is not None:
                return f"Error: invalid arguments for {name}: {error.message}"
        hook_ctx = self.ToolHookContext(tool_name=name, params=params, session_id=session_id)
        for r in await self.fire("pre_tool_call", hook_ctx):
            if isinstance(r, self.BlockAction):
                return f"[blocked: {r.message}]"
        if check_fn is not None:
            try:
                if not check_fn():
                    return f"Error: {name} is unavailable (plugin check_fn returned False)"
            except Exception as exc:
                return f"Error: {name} availability check failed: {exc}"
        kwargs = params if accepted is None else {k: v for k, v in params.items() if k in accepted}
        start = time.perf_counter()
        try:
            result = handler(**kwargs)
            if hasattr(result, "__await__"):
                result = await result
            result = "" if result is None else str(result)
        except Exception as exc:
            result = f"Error executing {name}: {exc}"
        hook_ctx.result = result
        hook_ctx.duration_ms = (time.perf_counter() - start) * 1000
        hook_ctx.success = not result.startswith("Error")
        await self.fire("post_tool_call", hook_ctx)
        for r in await self.fire("transform_tool_result", hook_ctx):
            if isinstance(r, str):
                return r
        return result


def load(plugin_dir):
    spec = importlib.util.spec_from_file_location(
        "bench_plugin", f"{plugin_dir}/__init__.py", submodule_search_locations=[plugin_dir]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_plugin"] = module
    spec.loader.exec_module(module)
    ctx = ReferenceContext("bench")
    module.register(ctx)
    return ctx


async def per_call(host, name, args, calls):
    for _ in range(min(1000, calls)):
        await host.call_tool(name, dict(args))
    start = time.perf_counter()
    for _ in range(calls):
        await host.call_tool(name, dict(args))
    return (time.perf_counter() - start) / calls


async def direct_floor(ctx, name, args, calls):
    handler = ctx.tools[name][0]
    start = time.perf_counter()
    for _ in range(calls):
        r = handler(**args)
        if hasattr(r, "__await__"):
            await r
    return (time.perf_counter() - start) / calls


async def concurrent(ctx, count):
    handler = ctx.tools["sleep50"][0]
    start = time.perf_counter()
    await asyncio.gather(*(handler() for _ in range(count)))
    return time.perf_counter() - start


async def main():
    global _VALIDATE
    plugin_dir, compat_dir, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, compat_dir)
    import types

    native = types.ModuleType("_plughost_native")
    native.PluginContext = ReferenceContext
    sys.modules["_plughost_native"] = native
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        _VALIDATE = False
    validated = _VALIDATE
    ctx = load(plugin_dir)
    host = ReferenceHost(ctx)
    args = {"x": 1}
    out = {
        "validated": validated,
        "sync": await per_call(host, "sync_noop", args, calls),
        "async": await per_call(host, "async_noop", args, calls),
        "sync_floor": await direct_floor(ctx, "sync_noop", args, calls),
        "async_floor": await direct_floor(ctx, "async_noop", args, calls),
        "gather_1000": min([await concurrent(ctx, 1000) for _ in range(3)]),
    }
    _VALIDATE = False
    host_nv = ReferenceHost(load(plugin_dir))
    out["sync_no_validation"] = await per_call(host_nv, "sync_noop", args, calls)
    out["async_no_validation"] = await per_call(host_nv, "async_noop", args, calls)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
