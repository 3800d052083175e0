"""``flowly.plugins`` compat: the ``PluginContext`` plugins receive."""

from _plughost_native import PluginContext

__all__ = ["PluginContext"]
