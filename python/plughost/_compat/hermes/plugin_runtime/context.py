"""``plugin_runtime.context`` compat (plughost): ``PluginContext`` is the
context plughost hands a Hermes plugin's ``register(ctx)``."""

from __future__ import annotations

try:
    from _plughost_hermes import PluginContext  # noqa: F401  (re-exported)
except ImportError:  # a process a plugin started: no host, no context
    class PluginContext:  # type: ignore[no-redef]
        """No plughost host runs in this process: no plugin is registering here."""


class PluginToolOverrideError(PermissionError):
    """A plugin tried to override a built-in tool without the operator's opt-in."""
