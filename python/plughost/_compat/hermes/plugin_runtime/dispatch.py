"""``plugin_runtime.dispatch`` compat (plughost): Hermes's hook and
middleware names and dispatch constants. plughost's loop fires the hooks;
plugin code cannot (``hermes_cli.plugins.invoke_hook`` says so)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Set

from hermes_cli.plugins import VALID_HOOKS  # noqa: F401  (re-exported)

OBSERVER_SCHEMA_VERSION = "hermes.observer.v1"
HERMES_EVENT_NAMESPACE = "hermes"

TOOL_REQUEST_MIDDLEWARE = "tool_request"
TOOL_EXECUTION_MIDDLEWARE = "tool_execution"
LLM_REQUEST_MIDDLEWARE = "llm_request"
LLM_EXECUTION_MIDDLEWARE = "llm_execution"
VALID_MIDDLEWARE: Set[str] = {
    TOOL_REQUEST_MIDDLEWARE, TOOL_EXECUTION_MIDDLEWARE, LLM_REQUEST_MIDDLEWARE, LLM_EXECUTION_MIDDLEWARE,
}

_PLUGIN_COMMAND_AWAIT_TIMEOUT_SECS = 30.0


def resolve_plugin_command_result(result: Any) -> Any:
    """An awaitable's result, as Hermes resolves an async handler's: ``asyncio.run``
    with no running loop, else a helper thread (at most 30 s)."""
    if not inspect.isawaitable(result):
        return result

    async def _await():
        return await result

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await())
    outcome: dict = {}

    def _runner() -> None:
        try:
            outcome["value"] = asyncio.run(_await())
        except BaseException as exc:  # re-raised below
            outcome["exc"] = exc

    worker = threading.Thread(target=_runner, name="hermes-plugin-command-await", daemon=True)
    worker.start()
    worker.join(_PLUGIN_COMMAND_AWAIT_TIMEOUT_SECS)
    if worker.is_alive():
        raise TimeoutError("Plugin command async handler did not complete within "
                           f"{_PLUGIN_COMMAND_AWAIT_TIMEOUT_SECS:.0f}s")
    if "exc" in outcome:
        raise outcome["exc"]
    return outcome.get("value")
