"""``tools.mcp_tool``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "tools.mcp_tool is not hosted by plughost: plughost connects MCP servers itself (mcp.servers in config.json) and registers their tools before plugins run; there is no discovery to start from a plugin",
    name="tools.mcp_tool",
)
