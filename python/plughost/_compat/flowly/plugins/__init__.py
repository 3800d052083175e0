"""``flowly.plugins`` compat: the ``PluginContext`` plugins receive, and
``PluginManifest`` (``ctx.manifest``) from ``flowly.plugins.manifest``."""

from _plughost_flowly import PluginContext

__all__ = ["PluginContext", "PluginManifest"]


def __getattr__(name: str):
    # Submodules are installed after this package: resolve them on use.
    if name == "PluginManifest":
        from flowly.plugins.manifest import PluginManifest

        return PluginManifest
    if name == "manifest":
        # A submodule reached as an attribute is imported then.
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'flowly.plugins' has no attribute {name!r}")
