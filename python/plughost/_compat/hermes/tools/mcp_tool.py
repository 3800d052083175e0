"""``tools.mcp_tool`` (plughost): what plugins import of Hermes's MCP
client, backed by plughost's (``mcp_servers`` of ``config.json`` and the
servers bundles declare, connected by the host before its first turn).

Names follow Hermes: a server's tool is ``mcp_<server>_<tool>`` (each part
sanitised), in the toolset ``mcp-<server>``. The status functions answer
for the host whose tool call (or plugin load) is running now; plughost's
MCP servers connect after plugins load, so from ``register(ctx)`` they are
empty. Connecting or shutting servers down stays the host's: there is no
``register_mcp_servers`` / ``shutdown_mcp_servers`` here. To call a tool,
use ``ctx.call_mcp`` (allow-listed) or ``ctx.dispatch_tool`` with its
registry name (through the host's hooks).
"""

from __future__ import annotations

import re

from tools.registry import tool_error  # noqa: F401 — Hermes re-exports it here

MCP_TOOL_NAME_PREFIX = "mcp_"
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def sanitize_mcp_name_component(value) -> str:
    """Every character outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    return _UNSAFE.sub("_", str(value or ""))


def mcp_prefixed_tool_name(server_name: str, tool_name: str) -> str:
    """The registry name of ``tool_name`` of ``server_name``."""
    return f"{MCP_TOOL_NAME_PREFIX}{sanitize_mcp_name_component(server_name)}_{sanitize_mcp_name_component(tool_name)}"


def _servers() -> list:
    import _plughost_hermes

    return _plughost_hermes.mcp_servers() or []


def get_mcp_status() -> list:
    """One ``{"name", "transport", "tools", "connected", "state", "error"}`` per server
    (``tools``: how many it offers)."""
    return [{"name": s["name"], "transport": s["transport"], "tools": len(s["tools"]),
             "connected": s["state"] == "connected", "state": s["state"], "error": s.get("last_error")}
            for s in _servers()]


def discover_mcp_tools() -> list:
    """The registry names of every MCP tool the host offers (the host connected them already)."""
    return [name for s in _servers() for name in s["tools"]]


def get_registered_mcp_server_names() -> list:
    """The servers that offer tools."""
    return [s["name"] for s in _servers() if s["tools"]]


def has_registered_mcp_tools() -> bool:
    return any(s["tools"] for s in _servers())


def probe_mcp_server_tools() -> dict:
    """``{server: [(registry name, "")]}`` for the connected servers (descriptions are the registry's)."""
    return {s["name"]: [(name, "") for name in s["tools"]] for s in _servers() if s["state"] == "connected"}


def is_mcp_tool_parallel_safe(tool_name: str) -> bool:
    """plughost does not run one MCP server's calls in parallel by configuration: ``False``."""
    return False
