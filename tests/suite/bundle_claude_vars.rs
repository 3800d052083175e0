//! Claude Code's `${VAR}` / `${VAR:-default}` in a Claude-Code-layout
//! plugin's MCP server fields (issue 22, item 5): a stdio server whose
//! transport argument and environment come from defaults and from the
//! environment, an HTTP server whose URL is a default, both called in an
//! agent turn with the scripted model; a server that needs an unset
//! variable without a default is left out, the diagnostic naming it.
use crate::mcp_client_common;

use std::path::Path;
use std::sync::Arc;

use crate::mcp_client_common::{mcp_python, HttpServer, SERVER};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::ToolOutcome;
use serde_json::json;

const UNSET: &str = "PLUGHOST_TEST_SURELY_UNSET_VAR";

fn write_plugin(dir: &Path, python: &str, url: &str) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    let servers = json!({
        "tools": {"command": "${CLAUDE_PLUGIN_ROOT}/run-server",
                  "args": ["${CLAUDE_PLUGIN_ROOT}/server.py", format!("${{{UNSET}:-stdio}}")],
                  "env": {"MCP_PYTHON": python,
                          "GREETING": format!("${{{UNSET}:-hi}} from ${{HOME}}")}},
        "web": {"type": "http", "url": format!("${{{UNSET}:-{url}}}"),
                "headers": {"X-Home": "${HOME:-none}"}},
        "needs": {"type": "http", "url": format!("${{{UNSET}}}/mcp")}
    });
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "varry", "mcpServers": servers}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    let launcher = dir.join("run-server");
    std::fs::write(&launcher, "#!/bin/sh\nexec \"$MCP_PYTHON\" \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const TURN: &str = r#"
turns:
  - tool_calls:
      - name: mcp_tools_echo
        args: {text: "vars"}
      - name: mcp_web_add
        args: {a: 40, b: 2}
  - say: "{tool_results}"
"#;

#[test]
fn environment_variables_and_defaults_expand_in_mcp_server_fields() {
    assert!(std::env::var(UNSET).is_err(), "{UNSET} must be unset");
    let Some(python) = mcp_python() else { return };
    let home_var = std::env::var("HOME").expect("HOME is set for tests");
    let src = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let http = HttpServer::start(&python, &mcp_client_common::server_file(src.path()));
    let dir = home.path().join("plugins/varry");
    write_plugin(&dir, &python, &http.url);

    let data = home.path().join("plugin-data/varry");
    let package = plughost::dialects::bundle::claude::load(&dir, &data, false).unwrap();
    let problems = package.diagnostics.join("\n");
    assert!(
        problems.contains(&format!("mcp:needs: missing environment variable: {UNSET}")),
        "{problems}"
    );
    let names: Vec<&str> = package.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["tools", "web"]);

    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["varry"]}}).to_string(),
    )
    .unwrap();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let plugins = host.plugins();
    let record = plugins.iter().find(|p| p.key == "varry").unwrap();
    assert!(record.loaded, "{:?}", record.error);
    let tools: Vec<String> = host
        .registry()
        .tools()
        .iter()
        .map(|t| t.spec.name.clone())
        .collect();
    assert!(
        !tools.iter().any(|t| t.starts_with("mcp_needs_")),
        "{tools:?}"
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let host = Arc::new(host);
    let provider = Arc::new(Scripted::new(Script::parse(TURN, "t.yaml").unwrap()));
    let agent = {
        let _g = rt.enter();
        Agent::new(Arc::clone(&host), provider, AgentConfig::default(), None)
    };
    let report = rt.block_on(agent.send(Inbound::new("s", "go"), None));
    assert!(report.completed, "{:?}", report.error);
    let calls = &report.tool_calls;
    assert_eq!(calls[0].outcome, ToolOutcome::Ok, "{}", calls[0].result);
    assert_eq!(calls[0].result, format!("echo: vars (hi from {home_var})"));
    assert_eq!(calls[1].outcome, ToolOutcome::Ok, "{}", calls[1].result);
    assert_eq!(calls[1].result, "42");
    rt.block_on(agent.shutdown());
}
