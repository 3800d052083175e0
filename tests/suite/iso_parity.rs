//! Issue 47, item 1: a Hermes plugin's context members that call back into
//! the host (`inject_message`, `dispatch_tool`, `emit`/`subscribe`,
//! `has_plugin`, `get_config`/`set_config`, `on_unload`) do from a worker
//! what they do in-process. One scenario, run with no plugin isolated,
//! with one of the two isolated (events cross between plughost and the
//! worker), and with both isolated (events cross between two workers):
//! the three runs give the same results and the same trace.

use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::{json, Value};

/// Its `relay` tool uses every member that calls back into the host;
/// it hears `listener:pong`; its teardown is logged.
const CALLER: &str = r#"
import json, os

def log(line):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(line + "\n")

_CTX = None

def relay(args, **kwargs):
    log("relay runs")
    out = {
        "injected": _CTX.inject_message("note from the relay"),
        "dispatched": _CTX.dispatch_tool("echo_back", {"text": "hi"}),
        "has_listener": _CTX.has_plugin("listener"),
        "has_nobody": _CTX.has_plugin("nobody"),
        "emitted": _CTX.emit("ping", {"n": 1}),
        "greeting": _CTX.get_config("greeting", "unset"),
    }
    _CTX.set_config("seen", True)
    return json.dumps(out, sort_keys=True)

def register(ctx):
    global _CTX
    _CTX = ctx
    ctx.on_unload(lambda: log("caller unloaded"))
    ctx.subscribe("listener:pong", lambda text: log(f"caller got pong {text}"))
    obj = {"type": "object", "properties": {}}
    ctx.register_tool("relay", "parity", {"name": "relay", "parameters": obj}, relay)
"#;

/// Its `echo_back` tool emits `pong`; it hears `caller:ping`.
const LISTENER: &str = r#"
import os

def log(line):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(line + "\n")

def register(ctx):
    def echo_back(args, **kwargs):
        ctx.emit("pong", {"text": args.get("text")})
        return "echo: " + str(args.get("text"))
    ctx.on_unload(lambda: log("listener unloaded"))
    ctx.subscribe("caller:ping", lambda n: log(f"listener got ping {n}"))
    obj = {"type": "object", "properties": {"text": {"type": "string"}}}
    ctx.register_tool("echo_back", "parity", {"name": "echo_back", "parameters": obj}, echo_back)
"#;

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: relay
        args: {}
  - say: "done"
"#;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: home_with(&[]),
            hermes: tempfile::tempdir().unwrap(),
            bundled: no_bundled(),
        };
        std::fs::write(
            env.hermes.path().join("config.yaml"),
            "plugins:\n  enabled: [caller, listener]\n  entries:\n    caller:\n      settings:\n        greeting: hello\n",
        )
        .unwrap();
        for (name, init) in [("caller", CALLER), ("listener", LISTENER)] {
            write_plugin(
                &env.hermes.path().join("plugins"),
                name,
                &format!("name: {name}\nversion: 1.0.0\n"),
                &[("__init__.py", init)],
            );
        }
        env
    }

    fn log(&self) -> std::path::PathBuf {
        self.hermes.path().join("probe.log")
    }

    fn run(&self, isolate: &str) -> Output {
        let script = self.home.path().join("script.yaml");
        std::fs::write(&script, SCRIPT).unwrap();
        let ws = self.home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args([
            "--isolate",
            isolate,
            "run",
            "go",
            "--json",
            "--model",
            "scripted",
        ])
        .arg("--script")
        .arg(&script)
        .arg("--workspace")
        .arg(&ws)
        .env("PLUGHOST_HOME", self.home.path())
        .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
        .env("HERMES_HOME", self.hermes.path())
        .env("PROBE_LOG", self.log())
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
        .env_remove("HERMES_SAFE_MODE");
        run_bounded(cmd, Duration::from_secs(90))
    }
}

/// What one run gave: the relay's result, whether the injected note
/// reached the model's next call, the trace, the setting it wrote.
fn scenario(isolate: &str) -> (Value, bool, Vec<String>, Value) {
    let env = Env::new();
    let out = env.run(isolate);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "--isolate {isolate}: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let result: Value = serde_json::from_str(
        report["tool_calls"][0]["result"]
            .as_str()
            .unwrap_or_else(|| panic!("--isolate {isolate}: {report:#}\n{stderr}")),
    )
    .unwrap_or_else(|e| panic!("--isolate {isolate}: {e}: {report:#}"));
    let injected_reached = report["model_calls"][1]["messages"]
        .as_array()
        .is_some_and(|m| {
            m.iter()
                .any(|m| m["role"] == "user" && m["content"] == "note from the relay")
        });
    let trace: Vec<String> = std::fs::read_to_string(env.log())
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(env.home.path().join("config.json")).unwrap(),
    )
    .unwrap();
    let seen = config["plugins"]["entries"]["caller"]["settings"]["seen"].clone();
    (result, injected_reached, trace, seen)
}

/// Every line of `want` in `trace`, in that order.
fn in_order(trace: &[String], want: &[&str]) -> bool {
    let mut at = 0;
    for line in trace {
        if at < want.len() && line == want[at] {
            at += 1;
        }
    }
    at == want.len()
}

#[test]
fn a_hermes_plugins_host_members_work_the_same_in_process_and_isolated() {
    let runs = ["none", "caller", "all"].map(|isolate| (isolate, scenario(isolate)));
    for (isolate, (result, injected_reached, trace, seen)) in &runs {
        assert_eq!(
            result,
            &json!({
                "injected": true,
                "dispatched": "echo: hi",
                "has_listener": true,
                "has_nobody": false,
                "emitted": 1,
                "greeting": "hello",
            }),
            "--isolate {isolate}: {trace:?}"
        );
        assert!(
            injected_reached,
            "--isolate {isolate}: the injected note joins the conversation"
        );
        assert_eq!(seen, &json!(true), "--isolate {isolate}: set_config");
        // Both events were delivered (to the other plugin, whichever side
        // of the worker boundary it is), and each plugin's teardown ran
        // after the turn, at unload, not when it loaded.
        for (line, before) in [
            ("listener got ping 1", "relay runs"),
            ("caller got pong hi", "relay runs"),
            ("caller unloaded", "relay runs"),
            ("listener unloaded", "relay runs"),
        ] {
            assert!(
                in_order(trace, &[before, line]),
                "--isolate {isolate}: '{line}' after '{before}': {trace:?}"
            );
        }
        assert_eq!(
            trace.iter().filter(|l| l.ends_with("unloaded")).count(),
            2,
            "--isolate {isolate}: each teardown once: {trace:?}"
        );
    }
}
