"""``tools.mcp_oauth``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "tools.mcp_oauth is not hosted by plughost: plughost connects MCP servers itself (mcp.servers in config.json); it runs no interactive OAuth",
    name="tools.mcp_oauth",
)
