//! What plughost's MCP client costs (issue 22), in one run: one tool call
//! of a stdio MCP server written with the official Python `mcp` package,
//! through a plughost host (`host.call_tool("mcp_local_add")`: the tool
//! pipeline, argument validation, rmcp, the host's MCP runtime) against
//! the same call from the official Python client (`ClientSession.call_tool`
//! over `stdio_client`) to the same server, per call.
//!
//! `cargo bench --bench mcp_client`; `PLUGHOST_BENCH_CALLS` sets the sample
//! size (default 300); the Python is `$PLUGHOST_TEST_MCP_PYTHON`, else
//! `python3` (it must import `mcp`; the bench says so and stops if not).

use std::path::Path;
use std::time::Instant;

use plughost::Host;
use serde_json::json;

const SERVER: &str = include_str!("../tests/suite/mcp_client_common/server.py");

/// The official Python client timing `calls` calls of `add` (after a
/// warm-up), printing seconds per call.
const PY_CLIENT: &str = r#"
import asyncio, sys, time
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main(server, calls):
    params = StdioServerParameters(command=sys.executable, args=[server, "stdio"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(20):
                await session.call_tool("add", {"a": 1, "b": 2})
            best = None
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(calls):
                    await session.call_tool("add", {"a": 1, "b": 2})
                took = (time.perf_counter() - start) / calls
                best = took if best is None else min(best, took)
            print(best)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"#;

fn python() -> Option<String> {
    let candidates = std::env::var("PLUGHOST_TEST_MCP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .into_iter()
        .chain(["python3".to_string()]);
    candidates.into_iter().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import mcp"])
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Seconds per call through plughost: the best of three rounds.
fn through_plughost(python: &str, dir: &Path, server: &Path, calls: u32) -> f64 {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.json"),
        json!({"mcp_servers": {"local": {"command": python, "args": [server, "stdio"]}}})
            .to_string(),
    )
    .unwrap();
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let host = Host::builder()
        .home(&home)
        .bundled_dir(&empty)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let args = json!({"a": 1, "b": 2});
    rt.block_on(async {
        for _ in 0..20 {
            let r = host.call_tool("mcp_local_add", args.clone(), "bench").await;
            assert_eq!(r.text, "3", "{:?}", r.outcome);
        }
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..calls {
                host.call_tool("mcp_local_add", args.clone(), "bench").await;
            }
            best = best.min(start.elapsed().as_secs_f64() / f64::from(calls));
        }
        best
    })
}

fn main() {
    let Some(python) = python() else {
        println!("mcp_client bench skipped: no Python with the official `mcp` package (pip install mcp, or set PLUGHOST_TEST_MCP_PYTHON)");
        return;
    };
    let calls: u32 = std::env::var("PLUGHOST_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.py");
    std::fs::write(&server, SERVER).unwrap();
    let client = dir.path().join("client.py");
    std::fs::write(&client, PY_CLIENT).unwrap();

    let plughost = through_plughost(&python, dir.path(), &server, calls);
    let out = std::process::Command::new(&python)
        .arg(&client)
        .arg(&server)
        .arg(calls.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let direct: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    println!(
        "mcp tool call (stdio server, official Python mcp package), {calls} calls, best of 3:"
    );
    println!(
        "  through plughost (host.call_tool → pipeline → rmcp): {:8.1} µs/call",
        plughost * 1e6
    );
    println!(
        "  official Python client (ClientSession.call_tool):  {:8.1} µs/call",
        direct * 1e6
    );
    println!("  ratio plughost / Python client: {:.2}", plughost / direct);
}
