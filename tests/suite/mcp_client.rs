//! plughost as an MCP client (issue 22, item 4): `mcp_servers` of
//! `config.json` (a stdio server and a streamable-HTTP one, both written
//! with the official Python `mcp` package) connected through rmcp, their
//! tools called in agent turns with the scripted model through the host's
//! pipeline (hooks, argument validation, outcomes), a killed server
//! restarted by the next call, and `plugins doctor` showing each server.
use crate::common;
use crate::mcp_client_common;

use std::sync::{Arc, Mutex};

use crate::mcp_client_common::{mcp_python, server_file, HttpServer};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::core::outcome::ArgumentProblem;
use plughost::{HookAction, HookEvent, HookPayload, Host, ToolOutcome};
use serde_json::json;

struct Fixture {
    home: tempfile::TempDir,
    _bundled: tempfile::TempDir,
    _http: Option<HttpServer>,
    rt: tokio::runtime::Runtime,
}

/// A home whose `config.json` names the stdio server `local` (with an
/// environment variable) and, when `http`, the HTTP server `remote`.
fn fixture(python: &str, http: bool, extra: serde_json::Value) -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let script = server_file(home.path());
    let mut servers = json!({
        "local": {"command": python, "args": [script, "stdio"], "env": {"GREETING": "hi"}, "timeout": 3}
    });
    let http = http.then(|| HttpServer::start(python, &script));
    if let Some(h) = &http {
        servers["remote"] = json!({"url": h.url, "headers": {"X-Test": "yes"}});
    }
    for (k, v) in extra.as_object().unwrap() {
        servers[k] = v.clone();
    }
    std::fs::write(
        home.path().join("config.json"),
        json!({"mcp_servers": servers}).to_string(),
    )
    .unwrap();
    Fixture {
        home,
        _bundled: tempfile::tempdir().unwrap(),
        _http: http,
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    }
}

impl Fixture {
    fn host(&self, seen: Option<Arc<Mutex<Vec<String>>>>) -> Host {
        let mut builder = Host::builder()
            .home(self.home.path())
            .bundled_dir(self._bundled.path());
        if let Some(seen) = seen {
            builder = builder.hook(
                HookEvent::ToolGuard,
                move |_e: HookEvent, p: HookPayload<'_>| {
                    if let HookPayload::Tool(call) = p {
                        seen.lock().unwrap().push(call.tool_name.clone());
                        if call.tool_name == "mcp_local_pid" && call.params.get("blocked").is_some()
                        {
                            return HookAction::Block("no pids today".into());
                        }
                    }
                    HookAction::Continue
                },
            );
        }
        builder.build().unwrap()
    }
}

const TURN: &str = r#"
turns:
  - say: "Asking the servers."
    tool_calls:
      - name: mcp_local_echo
        args: {text: "hello"}
      - name: mcp_remote_add
        args: {a: 2, b: 40}
      - name: mcp_local_add
        args: {a: "two", b: 1}
      - name: mcp_local_fail
        args: {reason: "test"}
  - say: "Results: {tool_results}"
"#;

#[test]
fn stdio_and_http_servers_from_config_serve_an_agent_turn() {
    let Some(python) = mcp_python() else { return };
    let f = fixture(&python, true, json!({}));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let host = Arc::new(f.host(Some(Arc::clone(&seen))));
    let names: Vec<String> = host
        .registry()
        .tools()
        .iter()
        .map(|t| t.spec.name.clone())
        .collect();
    for name in [
        "mcp_local_echo",
        "mcp_local_add",
        "mcp_remote_add",
        "mcp_remote_pid",
    ] {
        assert!(names.contains(&name.to_string()), "{name} in {names:?}");
    }
    let echo = &host
        .registry()
        .tools()
        .into_iter()
        .find(|t| t.spec.name == "mcp_local_echo")
        .unwrap()
        .spec
        .clone();
    assert_eq!(echo.toolset, "mcp-local");
    assert_eq!(echo.description, "Say the text back.");
    assert_eq!(echo.parameters["required"], json!(["text"]));

    let provider = Arc::new(Scripted::new(Script::parse(TURN, "t.yaml").unwrap()));
    let agent = {
        let _g = f.rt.enter();
        Agent::new(Arc::clone(&host), provider, AgentConfig::default(), None)
    };
    let report = f.rt.block_on(agent.send(Inbound::new("s1", "go"), None));
    assert!(report.completed, "{:?}", report.error);
    let calls = &report.tool_calls;
    assert_eq!(calls[0].outcome, ToolOutcome::Ok, "{}", calls[0].result);
    assert_eq!(calls[0].result, "echo: hello (hi)");
    assert_eq!(calls[1].outcome, ToolOutcome::Ok, "{}", calls[1].result);
    assert_eq!(calls[1].result, "42");
    // The server's input schema is enforced before the server is asked.
    assert!(
        matches!(
            calls[2].outcome,
            ToolOutcome::InvalidArguments {
                problem: ArgumentProblem::Schema { .. }
            }
        ),
        "{:?}",
        calls[2].outcome
    );
    // A tool's isError is a raised outcome with the server's text.
    assert!(
        matches!(calls[3].outcome, ToolOutcome::Raised { .. }),
        "{:?}",
        calls[3].outcome
    );
    // (mcp 1.x sends the exception's text, 2.x only that the tool failed.)
    let failed = &calls[3].result;
    assert!(
        failed.contains("failed on purpose: test") || failed.contains("Error executing tool fail"),
        "{failed}"
    );
    let reply = report.reply.unwrap();
    assert!(reply.contains("echo: hello (hi)"), "{reply}");
    // Plugin-side hooks saw every call by its registry name.
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains(&"mcp_remote_add".to_string()), "{seen:?}");

    // A pre_tool_call guard blocks an MCP tool like any other.
    let blocked =
        f.rt.block_on(host.call_tool("mcp_local_pid", json!({"blocked": true}), "s1"));
    assert!(
        matches!(blocked.outcome, ToolOutcome::Blocked { .. }),
        "{:?}",
        blocked.outcome
    );

    let doctor = plughost::host::doctor::Report::new(&host);
    let text = doctor.text();
    assert!(text.contains("MCP servers:"), "{text}");
    assert!(
        text.contains("local (stdio, from config): connected, 5 tools"),
        "{text}"
    );
    assert!(
        text.contains("remote (http, from config): connected, 5 tools"),
        "{text}"
    );
    let json = serde_json::to_value(&doctor).unwrap();
    assert_eq!(json["mcp_servers"][0]["name"], "local");
    assert_eq!(json["mcp_servers"][0]["state"], "connected");
    f.rt.block_on(agent.shutdown());
}

fn pid_of(f: &Fixture, host: &Host) -> u32 {
    let r =
        f.rt.block_on(host.call_tool("mcp_local_pid", json!({}), "s"));
    assert_eq!(r.outcome, ToolOutcome::Ok, "{}", r.text);
    r.text.trim().parse().unwrap()
}

/// Whether process `pid` still runs: not gone, and not a zombie whose
/// threads have all exited (a killed process's leader turns zombie while
/// its other threads are still being torn down; only then may its parent
/// see it exit).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0);
    !(stat.contains(") Z ") && threads <= 1)
}

#[test]
fn a_killed_stdio_server_is_restarted_by_the_next_call() {
    let Some(python) = mcp_python() else { return };
    let f = fixture(&python, false, json!({}));
    let host = f.host(None);
    let first = pid_of(&f, &host);
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    mcp_client_common::wait_gone(first, alive);
    let second = pid_of(&f, &host);
    assert_ne!(first, second, "a new server process answered");
    assert!(alive(second));
    let text = plughost::host::doctor::Report::new(&host).text();
    assert!(
        text.contains("local (stdio, from config): connected, 5 tools, restarted 1 times"),
        "{text}"
    );
    // Dropping the host stops its servers.
    drop(host);
    mcp_client_common::wait_gone(second, alive);
}

#[test]
fn a_slow_call_times_out_and_a_server_that_cannot_start_is_reported() {
    let Some(python) = mcp_python() else { return };
    let f = fixture(
        &python,
        false,
        json!({"broken": {"command": "/nonexistent/mcp-server", "connect_timeout": 2}}),
    );
    let host = f.host(None);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.home.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["mcp_servers"]["local"]["timeout"], 3);
    let slow =
        f.rt.block_on(host.call_tool("mcp_local_sleep", json!({"seconds": 30}), "s"));
    assert!(
        matches!(slow.outcome, ToolOutcome::Raised { .. }),
        "{:?}",
        slow.outcome
    );
    assert!(
        slow.text.contains("did not answer within 3 s"),
        "{}",
        slow.text
    );
    // The server still answers after a call that timed out.
    let after =
        f.rt.block_on(host.call_tool("mcp_local_echo", json!({"text": "again"}), "s"));
    assert_eq!(after.outcome, ToolOutcome::Ok, "{}", after.text);
    let text = plughost::host::doctor::Report::new(&host).text();
    assert!(text.contains("broken (stdio, from config): failed; last error: cannot start '/nonexistent/mcp-server'"), "{text}");
    assert!(!host
        .registry()
        .tools()
        .iter()
        .any(|t| t.spec.name.starts_with("mcp_broken_")));
}

#[test]
fn a_malformed_mcp_servers_entry_fails_the_build_naming_it() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.json"),
        r#"{"mcp_servers": {"x": {"command": "a", "args": "not a list"}}}"#,
    )
    .unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let err = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .err()
        .expect("refused");
    assert!(err.to_string().contains("mcp_servers.x.args"), "{err}");
}

#[test]
fn the_cli_calls_an_mcp_tool_and_doctor_shows_the_server() {
    let Some(python) = mcp_python() else { return };
    let f = fixture(&python, false, json!({}));
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args).arg("--home").arg(f.home.path());
        common::run_bounded(cmd, std::time::Duration::from_secs(60))
    };
    let out = run(&[
        "tools",
        "call",
        "mcp_local_echo",
        "--args",
        r#"{"text": "cli"}"#,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("echo: cli (hi)"), "{stdout}");
    let out = run(&["plugins", "doctor"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("local (stdio, from config): connected, 5 tools"),
        "{stdout}"
    );
}
