//! What a plugin will be able to do, said at install (issue 23 item 4):
//! the risk summary from its manifest, the hooks and tools it registers
//! without declaring them (reported, and refused under
//! `plugins.strict_hooks`), and `plugins doctor` saying both.
use crate::common;

use std::process::{Command, Output};

use crate::common::{home_with, no_bundled, write_plugin};

fn run(home: &std::path::Path, bundled: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const MANIFEST: &str = "name: sneaky\nversion: 1.0.0\nprovides_hooks: [pre_llm_call, transform_tool_result]\nprovides_tools: [read_file]\npermissions: [network]\n";

const CODE: &str = "def register(ctx):\n    ctx.register_hook(\"pre_llm_call\", lambda c: None)\n    ctx.register_hook(\"pre_tool_call\", lambda c: None)\n    ctx.register_tool(\"extra_tool\", {}, lambda: \"x\")\n";

#[test]
fn the_install_summary_and_undeclared_registrations() {
    let src = tempfile::tempdir().unwrap();
    let dir = write_plugin(src.path(), "sneaky", MANIFEST, &[("__init__.py", CODE)]);
    let home = home_with(&[]);
    let bundled = no_bundled();
    let out = run(
        home.path(),
        bundled.path(),
        &["plugins", "install", dir.to_str().unwrap(), "--enable"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("What sneaky will be able to do"), "{said}");
    assert!(
        said.contains("[model] sees every model call (pre_llm_call)"),
        "{said}"
    );
    assert!(
        said.contains("[rewrite] can block or rewrite calls and results (transform_tool_result)"),
        "{said}"
    );
    assert!(
        said.contains("[shadow] replaces built-in tools (read_file)"),
        "{said}"
    );
    assert!(
        said.contains("[network] declares network access (network)"),
        "{said}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "hooks pre_tool_call (not in provides_hooks); tools extra_tool (not in provides_tools)"
        ),
        "{err}"
    );
    let doctor = run(home.path(), bundled.path(), &["plugins", "doctor"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor
            .contains("sneaky: registers what its manifest does not declare: hooks pre_tool_call"),
        "{doctor}"
    );

    // Turned on later, strictness refuses it at load.
    let config = serde_json::json!({"plugins": {"enabled": ["sneaky"], "disabled": [], "strict_hooks": true}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let out = run(
        home.path(),
        bundled.path(),
        &["tools", "call", "extra_tool"],
    );
    assert!(!out.status.success(), "{}", text(&out));
    let listed = run(home.path(), bundled.path(), &["plugins", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let record = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "sneaky")
        .unwrap()
        .clone();
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["error"]
            .as_str()
            .unwrap()
            .contains("plugins.strict_hooks in config.json refuses it"),
        "{record}"
    );

    // Under plugins.strict_hooks the same install is refused, not enabled.
    let strict = home_with(&[]);
    let config =
        serde_json::json!({"plugins": {"enabled": [], "disabled": [], "strict_hooks": true}});
    std::fs::write(strict.path().join("config.json"), config.to_string()).unwrap();
    let out = run(
        strict.path(),
        bundled.path(),
        &["plugins", "install", dir.to_str().unwrap(), "--enable"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("plugins.strict_hooks"), "{err}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(strict.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["plugins"]["enabled"], serde_json::json!([]));
}

/// Under `plugins.strict_hooks`, an isolated plugin refused at load has its
/// worker stopped at once: the refused code does not go on running beside
/// a long-running host (`mcp` here, its stdin kept open).
#[test]
fn a_refused_isolated_plugins_worker_is_stopped() {
    let src = tempfile::tempdir().unwrap();
    let pidfile = src.path().join("worker.pid");
    let code = format!(
        "import os\n{CODE}    open({:?}, 'w').write(str(os.getpid()))\n",
        pidfile.to_str().unwrap()
    );
    let home = home_with(&["sneaky"]);
    write_plugin(
        &home.path().join("plugins"),
        "sneaky",
        MANIFEST,
        &[("__init__.py", code.as_str())],
    );
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["sneaky"], "disabled": [], "strict_hooks": true}}"#,
    )
    .unwrap();
    let bundled = no_bundled();
    let mut mcp = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["--isolate", "all", "mcp"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let limit = std::time::Duration::from_secs(20);
    common::wait_until("the worker ran register()", limit, || {
        std::fs::read_to_string(&pidfile).is_ok_and(|t| !t.is_empty())
    });
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().parse().unwrap();
    let gone = || {
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        // A zombie is gone for this purpose (its parent reaps it later).
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        !alive || zombie
    };
    let started = std::time::Instant::now();
    while !gone() && started.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let stopped = gone();
    let still_serving = mcp.try_wait().unwrap().is_none();
    drop(mcp.stdin.take());
    let _ = mcp.wait();
    assert!(still_serving, "mcp ended early");
    assert!(
        stopped,
        "the refused plugin's worker {pid} still runs beside the host"
    );
}
