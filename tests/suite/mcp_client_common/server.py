"""A small MCP server for plughost's tests, written with the official
Python SDK: `server.py stdio` or `server.py http PORT`."""
import asyncio, os, sys

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
    def make(name, port):
        return Server(name)
    def run(app, transport, port):
        if transport == "stdio":
            app.run("stdio")
        else:
            app.run("streamable-http", host="127.0.0.1", port=port)
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
    def make(name, port):
        return Server(name, host="127.0.0.1", port=port or 8000)
    def run(app, transport, port):
        app.run("stdio" if transport == "stdio" else "streamable-http")

transport = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
app = make("plughost-test", port)

@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text} ({os.environ.get('GREETING', 'no greeting')})"

@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@app.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())

@app.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"failed on purpose: {reason}")

@app.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"

run(app, transport, port)
