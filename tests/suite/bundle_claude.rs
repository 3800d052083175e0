//! The Claude-Code bundle layout (issue 22, item 5): a plugin with
//! `.claude-plugin/plugin.json`, `skills/` and a `.mcp.json` whose servers
//! use `${CLAUDE_PLUGIN_ROOT}`/`${CLAUDE_PLUGIN_DATA}` is installed with
//! `plugins install`, enabled, and loads as the `bundle` dialect: its
//! skills listed, its stdio and HTTP MCP servers (written with the
//! official Python `mcp` package) started and their tools called in an
//! agent turn with the scripted model.
use crate::mcp_client_common;

use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use crate::mcp_client_common::{mcp_python, HttpServer, SERVER};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::ToolOutcome;
use serde_json::json;

/// A Claude-Code-layout plugin at `dir`: one good skill and one whose
/// name does not match its directory, a stdio server run through a
/// script of the plugin, and the HTTP server at `url`.
fn write_plugin(dir: &Path, python: &str, url: &str, servers_inline: bool) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::create_dir_all(dir.join("skills/review")).unwrap();
    std::fs::create_dir_all(dir.join("skills/other")).unwrap();
    std::fs::create_dir_all(dir.join("commands")).unwrap();
    let servers = json!({
        "tools": {"command": "${CLAUDE_PLUGIN_ROOT}/run-server",
                  "args": ["${CLAUDE_PLUGIN_ROOT}/server.py", "stdio"],
                  "env": {"MCP_PYTHON": python, "GREETING": "data at ${CLAUDE_PLUGIN_DATA}"}},
        "web": {"type": "http", "url": url},
        "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}
    });
    let mut manifest = json!({
        "name": "claudish", "version": "0.3.0",
        "description": "A Claude-Code-layout test plugin",
        "author": {"name": "Tests", "email": "t@example.com"}, "keywords": ["test"]
    });
    if servers_inline {
        manifest["mcpServers"] = servers;
    } else {
        std::fs::write(
            dir.join(".mcp.json"),
            json!({ "mcpServers": servers }).to_string(),
        )
        .unwrap();
    }
    std::fs::write(dir.join(".claude-plugin/plugin.json"), manifest.to_string()).unwrap();
    std::fs::write(
        dir.join("skills/review/SKILL.md"),
        "---\nname: review\ndescription: Review a change carefully.\n---\nRead the diff first.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("skills/other/SKILL.md"),
        "---\nname: not-other\ndescription: x\n---\n",
    )
    .unwrap();
    std::fs::write(dir.join("commands/hello.md"), "Say hello.\n").unwrap();
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
        args: {text: "from claude"}
      - name: mcp_web_add
        args: {a: 40, b: 2}
  - say: "{tool_results}"
"#;

fn cli(home: &Path, bundled: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PYTHONPATH")
        .output()
        .unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Install, enable and list skills through the CLI; then load the host
/// and run a turn calling both servers' tools.
fn installs_and_runs(servers_inline: bool) {
    let Some(python) = mcp_python() else { return };
    let src = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let http = HttpServer::start(&python, &mcp_client_common::server_file(src.path()));
    let dir = src.path().join("claudish-src");
    write_plugin(&dir, &python, &http.url, servers_inline);

    let out = cli(
        home.path(),
        bundled.path(),
        &["plugins", "install", dir.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("Installed claudish 0.3.0"),
        "{}",
        said(&out)
    );
    let out = cli(
        home.path(),
        bundled.path(),
        &["plugins", "enable", "claudish"],
    );
    assert!(out.status.success(), "{}", said(&out));
    let out = cli(home.path(), bundled.path(), &["skills", "list", "--json"]);
    let skills = said(&out);
    assert!(skills.contains("claudish:review"), "{skills}");
    // Claude Code names a skill by its folder, whatever its frontmatter says.
    assert!(skills.contains("claudish:other"), "{skills}");
    assert!(!skills.contains("not-other"), "{skills}");

    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let plugins = host.plugins();
    let record = plugins.iter().find(|p| p.key == "claudish").unwrap();
    assert!(record.loaded, "{:?}", record.error);
    assert_eq!(record.dialect.map(|d| d.as_str()), Some("bundle"));
    assert_eq!(
        record.skills,
        vec!["claudish:other".to_string(), "claudish:review".to_string()]
    );
    assert!(host
        .skill("claudish:review")
        .unwrap()
        .contains("Read the diff first."));
    let registry = host.registry();
    let tools = registry.tools();
    let echo = tools.iter().find(|t| t.spec.name == "mcp_tools_echo");
    assert_eq!(
        echo.expect("the stdio server's tools").spec.plugin,
        "claudish"
    );
    assert!(tools.iter().any(|t| t.spec.name == "mcp_web_add"));
    assert!(!tools.iter().any(|t| t.spec.name.starts_with("mcp_old_")));

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
    let data = home.path().join("plugin-data/claudish");
    assert!(
        data.is_dir(),
        "the data directory is made for the stdio server"
    );
    assert_eq!(
        calls[0].result,
        format!("echo: from claude (data at {})", data.display())
    );
    assert_eq!(calls[1].outcome, ToolOutcome::Ok, "{}", calls[1].result);
    assert_eq!(calls[1].result, "42");
    rt.block_on(agent.shutdown());
}

#[test]
fn a_claude_code_layout_plugin_with_a_dot_mcp_json_installs_and_runs() {
    installs_and_runs(false);
}

#[test]
fn a_claude_code_layout_plugin_with_inline_mcp_servers_installs_and_runs() {
    installs_and_runs(true);
}

#[test]
fn a_server_command_climbing_out_of_the_plugin_relatively_is_left_out() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("plugins/escapes");
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "escapes", "mcpServers": {
            "evil": {"command": "../../bin/sh"}
        }})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["escapes"]}}).to_string(),
    )
    .unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let plugins = host.plugins();
    let record = plugins.iter().find(|p| p.key == "escapes").unwrap();
    assert!(record.loaded, "{:?}", record.error);
    assert_eq!(record.dialect.map(|d| d.as_str()), Some("bundle"));
    assert!(!host
        .registry()
        .tools()
        .iter()
        .any(|t| t.spec.name.starts_with("mcp_evil_")));
}
