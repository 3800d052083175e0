//! Portable bundles (issue 22, item 5): a directory with an Agent Plugins
//! v1 `plugin.json` loads as the `bundle` dialect (no Python of its own):
//! its skills as skills, the MCP servers of its `mcp.json` (a stdio one and
//! a streamable-HTTP one, written with the official Python `mcp` package)
//! started through the host's MCP client with `${PLUGIN_ROOT}` and
//! `${PLUGIN_DATA}` substituted, their tools used in an agent turn with the
//! scripted model.
use crate::mcp_client_common;

use std::path::Path;
use std::sync::Arc;

use crate::mcp_client_common::{mcp_python, HttpServer, SERVER};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::ToolOutcome;
use serde_json::json;

const PLUGIN_SCHEMA: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
const MCP_SCHEMA: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";

/// A v1 bundle at `dir`: two skills (one invalid), a stdio server started
/// by a script of the bundle, and the HTTP server at `url`.
fn write_bundle(dir: &Path, python: &str, url: &str) {
    std::fs::create_dir_all(dir.join("skills/greet")).unwrap();
    std::fs::create_dir_all(dir.join("skills/Bad")).unwrap();
    std::fs::write(
        dir.join("plugin.json"),
        json!({
            "$schema": PLUGIN_SCHEMA, "name": "portable", "version": "1.2.0",
            "description": "A portable test bundle", "author": {"name": "Tests"},
            "keywords": ["test"], "license": "MIT"
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("skills/greet/SKILL.md"),
        "---\nname: greet\ndescription: Greet people warmly.\n---\nSay hello first.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("skills/Bad/SKILL.md"),
        "---\nname: Bad\ndescription: x\n---\n",
    )
    .unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    let launcher = dir.join("run-server");
    std::fs::write(&launcher, "#!/bin/sh\nexec \"$MCP_PYTHON\" \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("mcp.json"),
        json!({"$schema": MCP_SCHEMA, "mcpServers": {
            "tools": {"type": "stdio", "command": "./run-server",
                      "args": ["${PLUGIN_ROOT}/server.py", "stdio"],
                      "env": {"MCP_PYTHON": python, "GREETING": "data at ${PLUGIN_DATA}"}},
            "web": {"type": "streamable-http", "url": url},
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}
        }})
        .to_string(),
    )
    .unwrap();
}

const TURN: &str = r#"
turns:
  - tool_calls:
      - name: mcp_tools_echo
        args: {text: "from the bundle"}
      - name: mcp_web_add
        args: {a: 20, b: 22}
  - say: "{tool_results}"
"#;

#[test]
fn a_v1_bundle_loads_its_skills_and_its_mcp_servers() {
    let Some(python) = mcp_python() else { return };
    let home = tempfile::tempdir().unwrap();
    let http = HttpServer::start(&python, &mcp_client_common::server_file(home.path()));
    let bundle = home.path().join("plugins/portable");
    write_bundle(&bundle, &python, &http.url);
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["portable"]}}).to_string(),
    )
    .unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let pinned_plugins = host.plugins();
    let record = pinned_plugins.iter().find(|p| p.key == "portable").unwrap();
    assert!(record.loaded, "{:?}", record.error);
    assert_eq!(record.dialect.map(|d| d.as_str()), Some("bundle"));
    assert_eq!(record.skills, vec!["portable:greet".to_string()]);
    assert!(host
        .skill("portable:greet")
        .unwrap()
        .contains("Say hello first."));

    let pinned_registry = host.registry();
    let tools = pinned_registry.tools();
    let echo = tools
        .iter()
        .find(|t| t.spec.name == "mcp_tools_echo")
        .expect("the stdio server's tools");
    assert_eq!(echo.spec.plugin, "portable");
    assert!(tools.iter().any(|t| t.spec.name == "mcp_web_add"));
    assert!(!tools.iter().any(|t| t.spec.name.starts_with("mcp_old_")));
    let data = home.path().join("plugin-data/portable");
    assert!(
        data.is_dir(),
        "the data directory is made for the stdio server"
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
    // ${PLUGIN_DATA} was substituted in the server's environment.
    assert_eq!(
        calls[0].result,
        format!("echo: from the bundle (data at {})", data.display())
    );
    assert_eq!(calls[1].outcome, ToolOutcome::Ok, "{}", calls[1].result);
    assert_eq!(calls[1].result, "42");

    let text = plughost::host::doctor::Report::new(&host).text();
    assert!(
        text.contains("tools (stdio, from portable): connected, 5 tools"),
        "{text}"
    );
    assert!(
        text.contains("web (http, from portable): connected, 5 tools"),
        "{text}"
    );
    rt.block_on(agent.shutdown());
}

#[test]
fn a_bundle_with_a_bad_plugin_json_is_listed_with_the_reason() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("plugins/broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plugin.json"),
        json!({"$schema": PLUGIN_SCHEMA, "name": "Broken"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["Broken"]}}).to_string(),
    )
    .unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let pinned_plugins = host.plugins();
    let record = pinned_plugins.iter().find(|p| p.key == "Broken").unwrap();
    assert!(!record.loaded);
    let error = record.error.clone().unwrap_or_default();
    assert!(error.contains("does not satisfy v1 constraints"), "{error}");
}

#[test]
fn plugins_install_takes_a_bundle_directory() {
    let src = tempfile::tempdir().unwrap();
    let dir = src.path().join("portable");
    std::fs::create_dir_all(dir.join("skills/greet")).unwrap();
    std::fs::write(
        dir.join("plugin.json"),
        json!({"$schema": PLUGIN_SCHEMA, "name": "portable", "version": "1.2.0", "description": "A portable test bundle"})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("skills/greet/SKILL.md"),
        "---\nname: greet\ndescription: Greet people warmly.\n---\nSay hello first.\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_plughost"))
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env_remove("PYTHONPATH")
            .output()
            .unwrap()
    };
    let out = run(&["plugins", "install", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Installed portable 1.2.0"), "{said}");
    assert!(run(&["plugins", "enable", "portable"]).status.success());
    let out = run(&["skills", "list", "--json"]);
    let skills = String::from_utf8_lossy(&out.stdout);
    assert!(skills.contains("greet"), "{skills}");
}
