"""``gateway.platform_registry``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "gateway.platform_registry is not hosted by plughost: plughost runs no messaging gateway, so it has no platform registry; platform plugins are listed, not loaded",
    name="gateway.platform_registry",
)
