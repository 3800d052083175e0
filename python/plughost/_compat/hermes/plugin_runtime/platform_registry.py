"""``plugin_runtime.platform_registry`` compat (plughost): Hermes's canonical
home of the platform registry; the same objects as ``gateway.platform_registry``."""

from gateway.platform_registry import PlatformEntry, PlatformRegistry, platform_registry  # noqa: F401
