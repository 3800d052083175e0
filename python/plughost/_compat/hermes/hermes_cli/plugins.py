"""``hermes_cli.plugins`` compat (plughost): the names plugins import for typing
and constants.  ``PluginContext`` is plughost's own context class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Union

from _plughost_hermes import PluginContext  # noqa: F401  (re-exported)

ENTRY_POINTS_GROUP = "hermes_agent.plugins"

#: Hermes's hook names (v-mid); plughost accepts them all, see ``plughost plugins doctor``.
VALID_HOOKS: Set[str] = {
    "pre_tool_call", "post_tool_call", "transform_terminal_output", "transform_tool_result",
    "transform_llm_output", "pre_llm_call", "post_llm_call", "pre_api_request",
    "post_api_request", "api_request_error", "on_session_start", "on_session_end",
    "on_session_finalize", "on_session_reset", "subagent_start", "subagent_stop",
    "pre_gateway_dispatch", "pre_approval_request", "post_approval_response",
    "pre_response_delivery",
}


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
