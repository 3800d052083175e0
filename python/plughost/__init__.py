"""plughost: run Python agent plugins unmodified inside a fast Rust runtime.

    import plughost
    host = plughost.Host()                      # discovers and loads plugins on first use
    host.plugins()                              # as `plughost plugins list --json`
    host.call_tool("name", {"a": 1})            # the full dispatch pipeline -> str
    await host.acall_tool("name", {"a": 1})     # the same, awaitable
    agent = plughost.Agent(host, model="scripted:demo")
    reply = await agent.send("hello", session_id="s1")
"""

from __future__ import annotations

from ._native import (
    Agent,
    Call,
    CommandNotFound,
    ConfigError,
    Host,
    ModelError,
    PlughostError,
    PluginContext,
    SkillNotFound,
)

__all__ = [
    "Agent",
    "Call",
    "CommandNotFound",
    "ConfigError",
    "Host",
    "ModelError",
    "PlughostError",
    "PluginContext",
    "SkillNotFound",
]
