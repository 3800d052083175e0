"""``hermes_cli.plugins`` compat (plughost): the names plugins import for typing
and constants.  ``PluginContext`` is plughost's own context class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Union

try:
    from _plughost_hermes import PluginContext  # noqa: F401  (re-exported)
except ImportError:  # a process a plugin started: no host, no context

    class PluginContext:  # type: ignore[no-redef]
        """No plughost host runs in this process: no plugin is registering here."""

ENTRY_POINTS_GROUP = "hermes_agent.plugins"

#: Hermes's hook names (the newest ``VALID_HOOKS``); plughost accepts them all and
#: ``plughost plugins doctor`` says why each one it never fires does not.
VALID_HOOKS: Set[str] = {
    "pre_tool_call", "post_tool_call", "transform_terminal_output", "transform_tool_result",
    "transform_llm_output", "pre_llm_call", "post_llm_call", "on_stream_start", "on_stream_delta",
    "on_stream_end", "on_interim_message", "pre_verify", "pre_api_request", "post_api_request",
    "api_request_error", "transform_api_error_classification", "on_session_start",
    "on_session_end", "on_session_finalize", "on_session_reset", "on_skill_lifecycle",
    "subagent_start", "subagent_stop", "pre_gateway_dispatch", "agent_loop_stopped",
    "pre_approval_request", "post_approval_response", "on_room_member_activity",
    "pre_transcription", "kanban_task_claimed", "kanban_task_completed", "kanban_task_blocked",
    "on_kanban_worker_spawned", "on_kanban_worker_exited", "on_kanban_worker_stale_claim",
    "on_kanban_task_updated", "on_kanban_dispatch_tick", "gateway_platform_event", "pre_command",
}


def discover_plugins() -> None:
    """Hermes loads its plugins here; in plughost the host has already found and
    loaded every enabled plugin before any plugin code runs, so there is nothing
    left to do."""
    return None


def _not_hosted(name: str) -> "NotImplementedError":
    return NotImplementedError(
        f"hermes_cli.plugins.{name} is not hosted by plughost: plugin code cannot fire "
        "hooks itself; plughost's agent loop fires them (register the callback with "
        "ctx.register_hook, or call a tool with ctx.dispatch_tool)"
    )


def get_plugin_manager():
    """Hermes's manager, as ``plugin_runtime.manager`` maps it onto plughost's host."""
    from plugin_runtime.manager import get_plugin_manager as manager

    return manager()


def has_hook(hook_name: str) -> bool:
    raise _not_hosted("has_hook")


def invoke_hook(hook_name: str, **kwargs: Any) -> list:
    raise _not_hosted("invoke_hook")


@dataclass
class PluginManifest:
    """Parsed representation of a plugin.yaml manifest."""

    name: str
    version: str = ""
    description: str = ""
    author: str = ""
    requires_env: List[Union[str, Dict[str, Any]]] = field(default_factory=list)
    provides_tools: List[str] = field(default_factory=list)
    provides_hooks: List[str] = field(default_factory=list)
    source: str = ""
    path: Optional[str] = None
    kind: str = "standalone"
    key: str = ""
