//! `tools.mcp_tool` (issue 21 item 4): a Hermes plugin imports it and sees
//! the host's MCP servers (the official Python `mcp` package's stdio
//! server) under Hermes's names, then calls one of their tools through
//! `tools.registry.dispatch` — plughost's MCP client behind Hermes's module.

use std::process::Command;
use std::time::Duration;

use crate::common::{no_bundled, run_bounded};
use crate::mcp_client_common::{mcp_python, server_file};
use serde_json::{json, Value};

const PLUGIN: &str = r#"
import json
import tools.mcp_tool as mcp_tool
from tools.registry import registry

AT_REGISTER = {}

def status(args, **kwargs):
    return json.dumps({
        "at_register": AT_REGISTER,
        "status": mcp_tool.get_mcp_status(),
        "tools": sorted(mcp_tool.discover_mcp_tools()),
        "servers": mcp_tool.get_registered_mcp_server_names(),
        "has": mcp_tool.has_registered_mcp_tools(),
        "name": mcp_tool.mcp_prefixed_tool_name("my-server", "do.it"),
        "echo": registry.dispatch(mcp_tool.mcp_prefixed_tool_name("local", "echo"), {"text": "hi"}),
    })

def register(ctx):
    AT_REGISTER["tools"] = mcp_tool.discover_mcp_tools()
    ctx.register_tool("mcp_status", "mcpwatch",
                      {"name": "mcp_status", "description": "MCP status",
                       "parameters": {"type": "object", "properties": {}}},
                      status)
"#;

#[test]
fn tools_mcp_tool_reports_the_hosts_servers_under_hermes_names() {
    let Some(python) = mcp_python() else { return };
    let home = tempfile::tempdir().unwrap();
    let hermes = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let script = server_file(home.path());
    let dir = home.path().join("src").join("mcpwatch");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), "name: mcpwatch\nversion: 1.0.0\n").unwrap();
    std::fs::write(dir.join("__init__.py"), PLUGIN).unwrap();
    std::fs::write(
        home.path().join("config.json"),
        json!({"mcp_servers": {"local": {"command": python, "args": [script, "stdio"]}}})
            .to_string(),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(90))
    };
    let out = run(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let turn = home.path().join("turn.yaml");
    std::fs::write(
        &turn,
        "turns:\n  - tool_calls:\n      - name: mcp_status\n        args: {}\n  - say: \"done\"\n",
    )
    .unwrap();
    let out = run(&[
        "run",
        "go",
        "--json",
        "--model",
        "scripted",
        "--script",
        turn.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let call = &report["tool_calls"][0];
    let seen: Value = serde_json::from_str(call["result"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {call:#}"));
    // plughost connects its servers after plugins load, as the module says.
    assert_eq!(seen["at_register"]["tools"], json!([]), "{seen:#}");
    let status = &seen["status"][0];
    assert_eq!(status["name"], "local", "{seen:#}");
    assert_eq!(status["transport"], "stdio");
    assert_eq!(status["connected"], true);
    assert!(status["tools"].as_u64().unwrap() >= 4, "{seen:#}");
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for name in ["mcp_local_add", "mcp_local_echo", "mcp_local_fail"] {
        assert!(tools.contains(&name), "{name}: {tools:?}");
    }
    assert_eq!(seen["servers"], json!(["local"]));
    assert_eq!(seen["has"], true);
    assert_eq!(seen["name"], "mcp_my_server_do_it");
    assert!(
        seen["echo"].as_str().unwrap().contains("echo: hi"),
        "{seen:#}"
    );
}
