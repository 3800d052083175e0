"""``plugin_runtime.manager`` compat (plughost): Hermes's ``PluginManager``
mapped onto plughost's host. The host discovered and loaded every enabled
plugin before any plugin code runs, so discovery has nothing left to do;
``has_plugin`` answers for the host whose plugin is registering (outside
``register`` no host is asking: ``False``); firing hooks is
plughost's loop's (``has_hook``/``invoke_hook`` raise, as in
``hermes_cli.plugins``)."""

from __future__ import annotations

from typing import Any

from plugin_runtime.context import PluginContext  # noqa: F401  (re-exported)


class PluginManager:
    """What plugin code may ask Hermes's manager, answered by plughost's host."""

    def discover_and_load(self, force: bool = False) -> None:
        return None

    def has_plugin(self, plugin_id: str) -> bool:
        """Whether a plugin of that key or manifest name is loaded on the host of the
        plugin registering now."""
        try:
            from _plughost_hermes_ctx import calling_bus
        except ImportError:
            return False
        bus = calling_bus()
        return bool(bus is not None and bus.has_plugin(plugin_id))

    def has_hook(self, hook_name: str) -> bool:
        from hermes_cli.plugins import has_hook

        return has_hook(hook_name)

    def invoke_hook(self, hook_name: str, **kwargs: Any) -> list:
        from hermes_cli.plugins import invoke_hook

        return invoke_hook(hook_name, **kwargs)


_MANAGER = PluginManager()


def get_plugin_manager() -> PluginManager:
    return _MANAGER
