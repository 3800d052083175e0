"""plughost's Felix dialect, Python half: the fallback finder for the
``felix`` / ``felix_ai`` modules plugins import, and the loader and hook
adapters the Rust dialect calls.

The finder is appended to the end of ``sys.meta_path``: consulted only after
every other finder, so a real Felix installation always wins and these
modules never shadow it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import types

#: module name -> (source, is a package)
SOURCES: "dict[str, tuple[str, bool]]" = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, source: str) -> None:
        self._source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        code = compile(self._source, f"<plughost:{module.__name__}>", "exec")
        exec(code, module.__dict__)


class FelixCompatFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`SOURCES` for names no other finder found."""

    def find_spec(self, fullname, path=None, target=None):
        entry = SOURCES.get(fullname)
        if entry is None:
            return None
        source, is_package = entry
        return importlib.util.spec_from_loader(
            fullname, _Loader(source), origin=f"<plughost:{fullname}>", is_package=is_package
        )


def install(sources: "dict[str, tuple[str, bool]]") -> None:
    """Register the compat sources and put the finder last on ``sys.meta_path`` (once)."""
    SOURCES.update(sources)
    if not any(isinstance(f, FelixCompatFinder) for f in sys.meta_path):
        sys.meta_path.append(FelixCompatFinder())


# --- the registry passed to register(registry) -------------------------------

HOOK_KINDS = (
    "before_turn",
    "filter_history",
    "before_compact",
    "before_model",
    "after_model",
    "before_tool",
    "after_tool",
    "compact_failed",
)


class PluginRegistry:
    """The object Felix passes to ``register(registry)``.

    Registrations are recorded for the host; after ``register`` returned,
    any further registration raises ``RuntimeError`` naming the plugin.
    """

    def __init__(self, key: str = "") -> None:
        self._key = key
        self._closed = False
        self.plugins: list = []
        self.hooks: list = []  # (kind, fn)
        self.startup_hooks: list = []
        self.run_finished: list = []
        self.unused: list = []  # names of accepted, never-used registrations
        self.audit_sink_factory = None
        self.usage_sink_factory = None
        self.authenticators: dict = {}

    def _check(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"Felix plugin '{self._key}' called registry.{what} after its register(registry) "
                "returned; register everything inside register()"
            )

    def register_plugin(self, plugin) -> None:
        self._check("register_plugin")
        self.plugins.append(plugin)

    def register_startup_hook(self, hook) -> None:
        self._check("register_startup_hook")
        self.startup_hooks.append(hook)

    def register_run_finished(self, hook, origin=None) -> None:
        self._check("register_run_finished")
        self.run_finished.append((hook, origin))
        self.unused.append("register_run_finished")

    def register_audit_sink(self, factory) -> None:
        """Felix's: the last registration wins; ``factory()`` is built once,
        at the first event, and its ``record(event)`` gets every audit row."""
        self._check("register_audit_sink")
        self.audit_sink_factory = factory

    def register_usage_sink(self, factory) -> None:
        """Felix's: ``factory(settings).record(tenant_id=, manifest_id=,
        model_id=, usage=)`` for every model call that reported usage."""
        self._check("register_usage_sink")
        self.usage_sink_factory = factory

    def register_authenticator(self, mode: str, builder) -> None:
        """Felix's: ``builder(settings)`` makes the authenticator of ``mode``
        (``plughost serve --auth MODE``); a later registration of a mode
        replaces it. The built-in modes (none, api_key, jwt) cannot be taken."""
        self._check("register_authenticator")
        if not callable(builder):
            raise TypeError(f"register_authenticator() needs a callable builder, got {type(builder).__name__}")
        from felix.auth.context import BUILTIN_AUTH_MODES

        if mode in BUILTIN_AUTH_MODES:
            raise ValueError(f"auth mode {mode!r} is built in and cannot be registered by a plugin")
        self.authenticators[str(mode)] = builder

    def _unused(self, name):
        def accept(*args, **kwargs) -> None:
            self._check(name)
            self.unused.append(name)

        return accept

    def __getattr__(self, name: str):
        if name.startswith("register_"):
            kind = name[len("register_") :]
            if kind in HOOK_KINDS:

                def add(hook, _kind=kind) -> None:
                    self._check(name)
                    if not callable(hook):
                        raise TypeError(f"{name}() needs a callable, got {type(hook).__name__}")
                    self.hooks.append((_kind, hook))

                return add
            if kind in (
                "model_provider",
                "decision_provider",
            ):
                return self._unused(name)
        raise AttributeError(f"'PluginRegistry' object has no attribute '{name}'")


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
    authenticators)``:
    tools as ``(name, description, parameters, tool)``, hooks as ``(kind, fn,
    label)``, cron tasks as ``(name, run)``, sinks as ``(audit factory, usage
    factory)`` (each ``None`` when not registered), routes as ``(plugin,
    self_authenticating_mounts, body_limit_bytes)``, authenticators as
    ``(mode, builder)``.
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
    return tools, hooks, startup, unused, _cron_tasks(key, registry.plugins), sinks, routes, authenticators


def _routes(key: str, plugins) -> list:
    """``(plugin, self_authenticating_mounts, body_limit_bytes, rate_limit_key)`` of every
    plugin object with a callable ``routes`` (read with ``getattr``, as
    Felix reads them; a property that raises is reported and taken as unset)."""
    import logging

    def read(plugin, name, default):
        try:
            value = getattr(plugin, name, default)
        except Exception as exc:
            logging.getLogger("plughost.felix").warning(
                "Felix plugin '%s': reading %s raised %s: %s; it is taken as unset", key, name, type(exc).__name__, exc
            )
            return default
        return default if value is None else value

    out = []
    for plugin in plugins:
        if not callable(getattr(plugin, "routes", None)):
            continue
        mounts = [str(m) for m in read(plugin, "self_authenticating_mounts", ())]
        limit = read(plugin, "body_limit_bytes", None)
        rate_key = read(plugin, "rate_limit_key", None)
        out.append((
            plugin,
            mounts,
            int(limit) if isinstance(limit, int) and limit > 0 else None,
            rate_key if callable(rate_key) else None,
        ))
    return out


#: round -> the FastAPI app of that mount round, held (weakly) only while
#: the server's mount holds it.
_APPS: "weakref.WeakValueDictionary" = None  # type: ignore[assignment]


def plugin_app(round: int = 0):
    """The FastAPI app every Felix plugin's ``routes(app, tools=…)`` adds to
    in one mount round (one app per round, as Felix's API process has one;
    ``plughost serve`` mounts a fresh round at start and after a reload that
    changed a plugin with routes, so a new version's routes never meet the
    old one's)."""
    global _APPS
    import weakref

    if _APPS is None:
        _APPS = weakref.WeakValueDictionary()
    app = _APPS.get(round)
    if app is None:
        try:
            from fastapi import FastAPI
        except ImportError as exc:
            raise ImportError(
                "Felix plugin routes are mounted on a FastAPI app, as Felix mounts them, and FastAPI is not "
                "installed for plughost's Python: pip install fastapi (or add it to the plugin's dependencies)"
            ) from exc
        app = FastAPI(title="plughost: Felix plugin routes", docs_url=None, redoc_url=None, openapi_url=None)
        _APPS[round] = app
    return app


def rate_limit_key(resolver, scope: dict):
    """Felix's ``RateLimitKeyResolver``: ``resolver(request)`` with a
    Starlette ``Request`` of the head (the body is never read); a non-empty
    string is the bucket, anything else lets the next resolver decide."""
    from starlette.requests import Request

    key = resolver(Request(scope))
    return key if isinstance(key, str) and key else None


def mount_routes(plugin, round: int = 0):
    """``plugin.routes(app, tools=None)`` on :func:`plugin_app` of ``round``;
    the app. (Felix passes its tool provider as ``tools``; plughost's tools
    are the agent's, reached through ``/v1`` and ``/mcp``.)"""
    app = plugin_app(round)
    plugin.routes(app, tools=None)
    return app


def _cron_tasks(key: str, plugins) -> list:
    """``(name, run)`` of every plugin's ``cron_tasks`` (Felix reads them
    with ``getattr``; a task without a callable ``run`` is skipped, as
    Felix's worker skips it — with a warning here)."""
    import logging

    out = []
    for plugin in plugins:
        try:
            tasks = getattr(plugin, "cron_tasks", ()) or ()
            tasks = list(tasks)
        except Exception as exc:
            logging.getLogger("plughost.felix").warning(
                "Felix plugin '%s': reading cron_tasks raised %s: %s; its cron tasks are skipped",
                key, type(exc).__name__, exc,
            )
            continue
        for task in tasks:
            name = getattr(task, "name", None) or "unnamed"
            run = getattr(task, "run", None)
            if not callable(run):
                logging.getLogger("plughost.felix").warning(
                    "Felix plugin '%s': cron task '%s' has no callable run; it is skipped", key, name
                )
                continue
            out.append((str(name), run))
    return out


def _parameters(tool) -> dict:
    schema = getattr(tool, "raw_input_schema", None) or getattr(tool, "args_schema", None)
    if schema is None:
        return {"type": "object", "properties": {}}
    if isinstance(schema, dict):
        return schema
    if hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    return {"type": "object", "properties": {}}


# --- values ------------------------------------------------------------------


def to_messages(items):
    from felix_ai.types import ChatMessage, ToolCall

    out = []
    for m in items or []:
        calls = None
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                args = fn.get("arguments")
                if isinstance(args, str):
                    import json

                    try:
                        args = json.loads(args) if args.strip() else {}
                    except ValueError:
                        args = {"_raw": args}
                calls.append(ToolCall(id=c.get("id", ""), name=fn.get("name", ""), args=args or {}))
        content = m.get("content")
        out.append(
            ChatMessage(
                role=m.get("role", "user"),
                content="" if content is None else content,
                tool_call_id=m.get("tool_call_id"),
                name=m.get("name"),
                tool_calls=calls,
            )
        )
    return out


class Mistake(Exception):
    """A hook answer of the wrong shape: reported, then ignored (fail open)."""


def from_message(m) -> dict:
    from felix_ai.types import ChatMessage

    if not isinstance(m, ChatMessage) and type(m).__name__ != "ChatMessage":
        raise Mistake(f"returned something other than a ChatMessage ({type(m).__name__})")
    import json

    out = {"role": m.role, "content": m.content if m.content is not None else ""}
    if getattr(m, "tool_calls", None):
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args or {})},
            }
            for c in m.tool_calls
        ]
    if getattr(m, "tool_call_id", None):
        out["tool_call_id"] = m.tool_call_id
    if getattr(m, "name", None):
        out["name"] = m.name
    return out


STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def args_for(kind: str, payload: dict, ctx: dict) -> tuple:
    """The positional arguments of a ``kind`` hook."""
    if kind in ("filter_history", "before_turn"):
        return (to_messages(payload["messages"]), ctx)
    if kind == "before_model":
        return ({"messages": to_messages(payload["messages"]), "tools": list(payload["tools"])}, ctx)
    if kind == "after_model":
        [message] = to_messages([payload["reply"]])
        return ({"message": message, "stop_reason": STOP_REASONS.get(payload["stop_reason"], "unknown")}, ctx)
    if kind == "before_tool":
        return (dict(payload["tool_call"]), ctx)
    if kind == "after_tool":
        return (dict(payload["tool_call"]), payload["result"], payload["is_error"], ctx)
    if kind == "before_compact":
        return ({"messages": to_messages(payload["messages"]), "kept": to_messages(payload["kept"])}, ctx)
    if kind == "compact_failed":
        return ({"error": payload["error"]}, ctx)
    raise ValueError(f"unknown Felix hook kind {kind!r}")


def _shape(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def interpret(kind: str, ret):
    """A hook's answer as ``(what, value)`` for the Rust side; raises
    :class:`Mistake` for a wrong shape."""
    if ret is None:
        return ("none", None)
    if kind == "filter_history":
        if not isinstance(ret, (list, tuple)):
            raise Mistake(f"answered {_shape(ret)}, not a list of ChatMessage; the history is kept")
        return ("messages", [from_message(m) for m in ret])
    if kind == "before_turn":
        if not isinstance(ret, (list, tuple)):
            raise Mistake(f"answered {_shape(ret)}, not a list of ChatMessage to append; nothing appended")
        return ("append", [from_message(m) for m in ret])
    if kind == "before_model":
        if not isinstance(ret, dict) or "messages" not in ret:
            raise Mistake(f"answered {_shape(ret)} without a 'messages' key; the call is sent as it was")
        if not isinstance(ret["messages"], (list, tuple)):
            raise Mistake("answered a 'messages' value that is not a list; the call is sent as it was")
        return ("messages", [from_message(m) for m in ret["messages"]])
    if kind == "after_model":
        if not isinstance(ret, dict) or "message" not in ret:
            raise Mistake(f"answered {_shape(ret)} without a 'message' key; the reply is kept")
        message = from_message(ret["message"])
        if message["role"] != "assistant":
            raise Mistake(f"returned a '{message['role']}' message, not an assistant's; the reply is kept")
        return ("reply", message)
    if kind == "before_tool":
        if not isinstance(ret, dict):
            raise Mistake(f"answered {_shape(ret)}, not a dict; treated as allow")
        if "block" not in ret:
            raise Mistake(f"answered {_shape(ret)} without a 'block' key; treated as allow")
        if not ret["block"]:
            return ("none", None)
        reason = ret.get("reason") or "blocked by before_tool hook"
        return ("block", {"reason": str(reason), "terminate": bool(ret.get("terminate"))})
    if kind == "after_tool":
        if not isinstance(ret, dict):
            raise Mistake(f"answered {_shape(ret)}, not a dict; the result is kept")
        out = {}
        if "content" in ret and ret["content"] is not None:
            content = ret["content"]
            if not isinstance(content, str):
                from felix.tools.types import tool_output_content

                content = tool_output_content(content)
            out["content"] = content
        if ret.get("terminate"):
            out["terminate"] = True
        return ("merge", out)
    if kind == "before_compact":
        if not isinstance(ret, dict):
            raise Mistake(f"answered {_shape(ret)}, not a dict; compaction goes on")
        if ret.get("cancel"):
            return ("cancel", None)
        if ret.get("summary") is not None:
            return ("summary", str(ret["summary"]))
        return ("none", None)
    return ("none", None)


# --- tools ---------------------------------------------------------------------


def call_tool(tool, arguments: dict, thread_id: str, tool_call_id: str, delegate: bool):
    """Run a Felix tool as Felix's tool runner does: its executor's
    ``execute(args, ctx)`` (``define_tool``'s validates, then calls
    ``handler(parsed, ctx)`` or ``handler(parsed)``). Returns an awaitable."""
    from felix.tools.types import ToolInvocationCtx

    ctx = ToolInvocationCtx(
        manifest_id="delegate" if delegate else "main",
        tool_call_id=tool_call_id,
        thread_id=thread_id,
        signal=None,
    )
    return tool.executor.execute(arguments, ctx)


def tool_text(ret) -> "tuple[str, bool]":
    """A handler's return as ``(text, is_error)``."""
    from felix.tools.types import tool_output_content

    text = tool_output_content(ret)
    meta = ret.get("metadata") if isinstance(ret, dict) else getattr(ret, "metadata", None)
    error = isinstance(meta, dict) and bool(meta.get("is_error") or meta.get("error_code"))
    # Felix's failure tags mark a failed call whatever carried them.
    error = error or text.startswith(("[error/", "[tool error/", "[fatal/"))
    return text, error


def error_text(tool, exc) -> str:
    """``[error/<code>] <exc>`` (or ``[fatal/<code>]`` for a fatal tool)."""
    from felix.tools.errors import infer_error_code

    code = infer_error_code(exc)
    code = getattr(code, "value", code)
    tag = "fatal" if getattr(tool, "fatal", False) else "error"
    return f"[{tag}/{code}] {exc}"


class App:
    """The stand-in ``app`` startup hooks get (``felix_api.app`` awaits ``hook(app)``)."""

    def __init__(self, plugins, tools) -> None:
        self.state = types.SimpleNamespace(settings=types.SimpleNamespace(), plugins=list(plugins), tools=list(tools))


# --- audit and usage sinks -----------------------------------------------------


def audit_row(event_type: str, manifest_id: str, status: str, payload: dict) -> dict:
    """An audit event in the shape of Felix's ``record_event`` rows."""
    import time
    import uuid

    return {
        "tenant_id": "default",
        "id": uuid.uuid4().hex,
        "ts": int(time.time() * 1000),
        "event_type": event_type,
        "manifest_id": manifest_id,
        "principal_subj": "",
        "status": status,
        "payload_json": payload,
    }


def record_usage(factory, manifest_id: str, model_id: str, usage: dict) -> None:
    """Felix's usage fan-out: ``factory(settings).record(...)`` with a
    ``TokenUsage`` made of the provider's counts."""
    from felix_ai.types import TokenUsage

    def count(*names):
        for name in names:
            value = usage.get(name)
            if isinstance(value, (int, float)):
                return int(value)
        return 0

    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    tokens = TokenUsage(
        input=count("prompt_tokens", "input_tokens", "input"),
        output=count("completion_tokens", "output_tokens", "output"),
        cache_creation=count("cache_creation_input_tokens", "cache_creation"),
        cache_read=int(cached) if isinstance(cached, (int, float)) else count("cache_read_input_tokens", "cache_read"),
    )
    sink = factory(types.SimpleNamespace())
    record = getattr(sink, "record", None)
    if callable(record):
        record(tenant_id="default", manifest_id=manifest_id, model_id=model_id, usage=tokens)


# --- authenticators ----------------------------------------------------------------


async def authenticate(builder, connection: dict, emit):
    """Felix's ``_call_authenticator``: ``builder(settings)`` then its
    ``authenticate(request)`` (or the authenticator itself called), either
    step sync or async, with a Starlette ``Request``. An ``AuthContext``
    accepts the caller: its principal's subject is returned. A Starlette
    response refuses it: the response is sent through ``emit`` as an ASGI
    application sends one, and ``None`` is returned."""
    import inspect

    from starlette.requests import Request
    from starlette.responses import Response

    from felix.auth.context import AuthContext

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    authenticator = builder(types.SimpleNamespace())
    if inspect.isawaitable(authenticator):
        authenticator = await authenticator
    call = getattr(authenticator, "authenticate", authenticator)
    result = call(Request(connection, receive))
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, Response):
        async def send(message):
            kind = message["type"]
            if kind == "http.response.start":
                emit(("start", int(message["status"]), [(bytes(k), bytes(v)) for k, v in message.get("headers") or ()]))
            elif kind == "http.response.body":
                emit(("body", bytes(message.get("body") or b""), bool(message.get("more_body", False))))

        await result(connection, receive, send)
        return None
    if isinstance(result, AuthContext) or type(result).__name__ == "AuthContext":
        principal = getattr(result, "principal", None)
        return str(getattr(principal, "subject", "") or "")
    raise TypeError(
        f"plugin authenticator returned {type(result).__name__}, expected AuthContext or JSONResponse"
    )

