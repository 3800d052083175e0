"""``plugin_runtime.context`` compat (plughost): ``PluginContext`` is the
context plughost hands a Hermes plugin's ``register(ctx)``."""

from __future__ import annotations

from hermes_cli.plugins import PluginContext  # noqa: F401  (re-exported)


class PluginToolOverrideError(PermissionError):
    """A plugin tried to override a built-in tool without the operator's opt-in."""
