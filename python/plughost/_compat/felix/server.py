"""The server side of Felix plugins under ``plughost serve``: routes on a FastAPI app per mount round, rate-limit keys, cron tasks, audit and usage sinks, authenticators."""

from __future__ import annotations

import types


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
