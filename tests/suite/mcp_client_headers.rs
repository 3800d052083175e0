//! `mcp_servers` headers reach a streamable-HTTP server (issue 22, item 4):
//! a server written with the official Python `mcp` package answers with
//! the request headers it got; a call through the host's pipeline shows
//! the configured `X-Test` and `Authorization` headers arrived.

use crate::mcp_client_common::{mcp_python, HttpServer};
use plughost::{Host, ToolOutcome};
use serde_json::json;

const SERVER: &str = r#"
import sys
try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server, Context
    app = Server("headers")
    def run():
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server, Context
    app = Server("headers", host="127.0.0.1", port=int(sys.argv[2]))
    def run():
        app.run("streamable-http")

@app.tool()
def header(name: str, ctx: Context) -> str:
    """One header of the request that carried this call."""
    request = ctx.request_context.request
    return str(request.headers.get(name) if request is not None else None)

run()
"#;

#[test]
fn configured_headers_reach_the_http_server() {
    let Some(python) = mcp_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("headers_server.py");
    std::fs::write(&script, SERVER).unwrap();
    let http = HttpServer::start(&python, &script);
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.json"),
        json!({"mcp_servers": {"remote": {"url": http.url,
            "headers": {"X-Test": "yes", "Authorization": "Bearer t0k"}}}})
        .to_string(),
    )
    .unwrap();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for (name, expected) in [
        ("x-test", "yes"),
        ("authorization", "Bearer t0k"),
        ("x-absent", "None"),
    ] {
        let r = rt.block_on(host.call_tool("mcp_remote_header", json!({"name": name}), "s"));
        assert_eq!(r.outcome, ToolOutcome::Ok, "{}", r.text);
        assert_eq!(r.text, expected, "{name}");
    }
}
