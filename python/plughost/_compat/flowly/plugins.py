"""``flowly.plugins`` compat: the ``PluginContext`` plugins receive."""

from _plughost_flowly import PluginContext

__all__ = ["PluginContext"]
