"""``gateway.config``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "gateway.config is not hosted by plughost: plughost runs no messaging gateway (no platforms, no gateway config); platform plugins are listed, not loaded",
    name="gateway.config",
)
