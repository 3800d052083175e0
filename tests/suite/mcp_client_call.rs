//! Hermes's `ctx.call_mcp` (issue 22, item 4): a Hermes plugin's tool calls
//! a tool of the host's stdio MCP server (the official Python `mcp`
//! package) in an agent turn with the scripted model, within its
//! per-server allowlist; a server outside it raises `PermissionError`.

use std::sync::Arc;

use crate::mcp_client_common::{mcp_python, server_file};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::{Host, ToolOutcome};
use serde_json::{json, Value};

const CALLER: &str = r#"
import json

SCHEMA = {"name": "ask_mcp", "description": "Call an MCP tool",
          "parameters": {"type": "object", "properties": {
              "server": {"type": "string"}, "tool": {"type": "string"},
              "arguments": {"type": "object"}, "timeout": {"type": "number"}},
              "required": ["server", "tool"]}}

def register(ctx):
    def ask(args, **kwargs):
        try:
            answer = ctx.call_mcp(args["server"], args["tool"], args.get("arguments"),
                                  timeout=args.get("timeout", 30))
        except PermissionError as e:
            return json.dumps({"permission_error": str(e)})
        assert isinstance(answer, dict)
        return json.dumps(answer, sort_keys=True)
    ctx.register_tool("ask_mcp", "mcp-demo", SCHEMA, ask)
"#;

const TURN: &str = r#"
turns:
  - tool_calls:
      - name: ask_mcp
        args: {server: local, tool: echo, arguments: {text: "via ctx"}}
      - name: ask_mcp
        args: {server: local, tool: add, arguments: {a: 1, b: 2}}
      - name: ask_mcp
        args: {server: local, tool: fail, arguments: {reason: "x"}}
      - name: ask_mcp
        args: {server: elsewhere, tool: echo, arguments: {text: "no"}}
      - name: ask_mcp
        args: {server: unlisted, tool: echo, arguments: {text: "no"}}
      - name: ask_mcp
        args: {server: local, tool: sleep, arguments: {seconds: 5}, timeout: 0.01}
  - say: "done"
"#;

#[test]
fn a_hermes_plugin_calls_an_allowed_mcp_server_in_a_turn() {
    let Some(python) = mcp_python() else { return };
    let home = tempfile::tempdir().unwrap();
    let script = server_file(home.path());
    common_plugin(home.path());
    std::fs::write(
        home.path().join("config.json"),
        json!({
            "plugins": {
                "enabled": ["caller"],
                "dialects": {"caller": "hermes"},
                "entries": {"caller": {"mcp_allowlist": ["local", "elsewhere"]}}
            },
            "mcp_servers": {
                "local": {"command": python, "args": [script, "stdio"]},
                "unlisted": {"command": python, "args": [script, "stdio"]}
            }
        })
        .to_string(),
    )
    .unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let pinned_plugins = host.plugins();
    let caller = pinned_plugins.iter().find(|p| p.key == "caller").unwrap();
    assert!(caller.loaded, "{:?}", caller.error);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let provider = Arc::new(Scripted::new(Script::parse(TURN, "t.yaml").unwrap()));
    let agent = {
        let _g = rt.enter();
        Agent::new(Arc::new(host), provider, AgentConfig::default(), None)
    };
    let report = rt.block_on(agent.send(Inbound::new("s", "go"), None));
    assert!(report.completed, "{:?}", report.error);
    let results: Vec<Value> = report
        .tool_calls
        .iter()
        .map(|c| {
            assert_eq!(c.outcome, ToolOutcome::Ok, "{}", c.result);
            serde_json::from_str(&c.result).unwrap()
        })
        .collect();
    assert_eq!(results[0]["ok"], true, "{}", results[0]);
    assert_eq!(results[0]["result"], "echo: via ctx (no greeting)");
    // The SDK's structuredContent beside a text that is not its JSON stays,
    // as in Hermes.
    assert_eq!(
        results[0]["structuredContent"],
        json!({"result": "echo: via ctx (no greeting)"})
    );
    assert_eq!(results[1]["ok"], true);
    assert_eq!(results[1]["result"], "3");
    assert_eq!(results[2]["ok"], false, "{}", results[2]);
    // Allowed, but the host has no such server: Hermes's "not connected".
    assert_eq!(
        results[3],
        json!({"ok": false, "error": "MCP server 'elsewhere' is not connected"})
    );
    let refused = results[4]["permission_error"].as_str().unwrap();
    assert!(
        refused.contains("not allowed to call MCP server 'unlisted'")
            && refused.contains("plugins.entries.caller.mcp_allowlist"),
        "{refused}"
    );
    // The timeout is clamped to at least 1 s, and a call past it fails.
    assert_eq!(results[5]["ok"], false);
    assert!(
        results[5]["error"]
            .as_str()
            .unwrap()
            .contains("did not answer within 1 s"),
        "{}",
        results[5]
    );
    rt.block_on(agent.shutdown());
}

fn common_plugin(home: &std::path::Path) {
    let dir = home.join("plugins").join("caller");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), "name: caller\nversion: 1.0.0\n").unwrap();
    std::fs::write(dir.join("__init__.py"), CALLER).unwrap();
}
