"""Loading a Felix plugin: its entry point imported, ``register(registry)`` called, and what it registered collected for the Rust dialect."""

from __future__ import annotations

import importlib
import inspect
import sys

from _plughost_felix_registry import PluginRegistry
from _plughost_felix_server import _cron_tasks, _routes


def _resolve(module_name: str, attr: str):
    target = importlib.import_module(module_name)
    for part in [p for p in attr.split(".") if p]:
        target = getattr(target, part)
    return target


def _imported_elsewhere(module_name: str, source_dir: str) -> "str | None":
    """Where the entry point's top-level package was imported from, when
    that is not the plugin's source tree: modules keep their real names in
    ``sys.modules``, so a package of the same name imported before (by
    another plugin, or another Host of this process) would otherwise be
    used in this plugin's place, silently running someone else's code."""
    import os.path

    top = sys.modules.get(module_name.partition(".")[0])
    file = getattr(top, "__file__", None)
    if not file:
        return None  # a namespace package: no single origin to compare
    root = os.path.realpath(source_dir)
    origin = os.path.realpath(file)
    if os.path.commonpath([root, origin]) == root:
        return None
    return origin


def _label(fn) -> str:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__
    return f"{module}.{qual}"


def load(key: str, module_name: str, attr: str, source_dir: "str | None"):
    """Import the entry point, call ``register(registry)`` and collect what it registered.

    Returns ``(tools, hooks, startup_hooks, unused, cron_tasks, sinks, routes,
    authenticators, model_providers)``:
    tools as ``(name, description, parameters, tool)``, hooks as ``(kind, fn,
    label)``, cron tasks as ``(name, run)``, sinks as ``(audit factory, usage
    factory)`` (each ``None`` when not registered), routes as ``(plugin,
    self_authenticating_mounts, body_limit_bytes)``, authenticators as
    ``(mode, builder)``, model providers as ``(name, factory)`` (those the
    plugin registered while it loaded).
    """
    if source_dir and source_dir not in sys.path:
        sys.path.insert(0, source_dir)
    # Checked before the import too: importing a submodule of a package
    # imported from elsewhere would run that package's code first.
    elsewhere = source_dir and _imported_elsewhere(module_name, source_dir)
    if not elsewhere:
        target = _resolve(module_name, attr or "register")
        elsewhere = source_dir and _imported_elsewhere(module_name, source_dir)
    if elsewhere:
        raise ImportError(
            f"module '{module_name.partition('.')[0]}' is already imported from {elsewhere}, not from this "
            f"plugin's {source_dir}: another plugin (or another Host in this process) provides a package "
            "of the same name; rename one of them"
        )
    if not callable(target):
        raise TypeError(
            f"entry point '{module_name}:{attr}' is a {type(target).__name__}, not a callable register(registry)"
        )
    registry = PluginRegistry(key)
    from felix.patterns import model_registry

    providers_before = dict(model_registry._REGISTERED)
    try:
        returned = target(registry)
        if inspect.isawaitable(returned):
            if inspect.iscoroutine(returned):
                returned.close()
            raise TypeError(
                "register(registry) returned an awaitable; Felix calls register synchronously (make it a plain def)"
            )
    finally:
        registry._closed = True
    from felix.tools.types import Tool  # compat or real

    tools = []
    for plugin in registry.plugins:
        register_tools = getattr(plugin, "register_tools", None)
        if not callable(register_tools):
            continue

        def add(name, factory, _plugin=plugin):
            try:
                tool = factory()
            except Exception as exc:  # a factory that raises skips its tool
                import logging

                logging.getLogger("plughost.felix").warning(
                    "Felix plugin '%s': the factory of tool '%s' raised %s: %s; the tool is skipped",
                    key, name, type(exc).__name__, exc,
                )
                return
            tool_name = getattr(tool, "name", None)
            if not isinstance(tool, Tool) and not hasattr(tool, "executor"):
                import logging

                logging.getLogger("plughost.felix").warning(
                    "Felix plugin '%s': the factory of tool '%s' returned a %s, not a Tool; the tool is skipped",
                    key, name, type(tool).__name__,
                )
                return
            if tool_name != name:
                import logging

                logging.getLogger("plughost.felix").warning(
                    "Felix plugin '%s': tool registered as '%s' is named '%s'; the tool is skipped",
                    key, name, tool_name,
                )
                return
            tools.append((name, getattr(tool, "description", "") or "", _parameters(tool), tool))

        register_tools(add)
    hooks = [(kind, fn, _label(fn)) for kind, fn in registry.hooks]
    startup = [(fn, _label(fn)) for fn in registry.startup_hooks]
    unused = sorted(set(registry.unused))
    for plugin in registry.plugins:
        # Honoured with the plugin's routes (serve's limiter); without routes
        # there is nothing of the plugin's for serve to mount it with.
        if getattr(plugin, "rate_limit_key", None) is not None and not callable(getattr(plugin, "routes", None)):
            unused.append("rate_limit_key")
    sinks = (registry.audit_sink_factory, registry.usage_sink_factory)
    routes = _routes(key, registry.plugins)
    authenticators = sorted(registry.authenticators.items())
    models = [(n, f) for n, f in model_registry._REGISTERED.items()
              if f is not None and providers_before.get(n) is not f]
    return (tools, hooks, startup, unused, _cron_tasks(key, registry.plugins), sinks, routes,
            authenticators, models)


def _parameters(tool) -> dict:
    schema = getattr(tool, "raw_input_schema", None) or getattr(tool, "args_schema", None)
    if schema is None:
        return {"type": "object", "properties": {}}
    if isinstance(schema, dict):
        return schema
    if hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    return {"type": "object", "properties": {}}
