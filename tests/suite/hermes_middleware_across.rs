//! Hermes `tool_execution` middleware of one plugin around another
//! plugin's tool, with `run`'s defaults (each third-party plugin in a
//! worker of its own) and with the middleware's plugin trusted
//! (in-process around an isolated tool): the middleware's `next_call`
//! runs the rest of the chain in plughost and hands the tool's result
//! back; a second `next_call` is refused as in-process (single use); a
//! middleware that raises after `next_call` keeps the tool's result.
//! Each run's processes are shown by the plugins' own pids.

use std::process::Command;
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

const MIDDLEWARE: &str = r#"
import json, os

def _log(**fields):
    with open(os.environ["MW_LOG"], "a") as f:
        f.write(json.dumps(fields) + "\n")

def wrap(tool_name, args, next_call, **kwargs):
    result = next_call({"text": args["text"] + " (via wrap)"})
    try:
        next_call(args)
        again = "ran twice"
    except RuntimeError as e:
        again = str(e)
    _log(where="wrap", pid=os.getpid(), again=again)
    return result + " [wrapped]"

def late_failure(tool_name, args, next_call, **kwargs):
    next_call(args)
    raise ValueError("after next")

def register(ctx):
    ctx.register_middleware("tool_execution", wrap)
    ctx.register_middleware("tool_execution", late_failure)
"#;

const TOOL: &str = r#"
import json, os

def echo(args, **kwargs):
    with open(os.environ["MW_LOG"], "a") as f:
        f.write(json.dumps({"where": "echo", "pid": os.getpid(), "text": args["text"]}) + "\n")
    return "echo:" + args["text"]

def register(ctx):
    schema = {"name": "echo", "parameters": {"type": "object",
              "properties": {"text": {"type": "string"}}, "required": ["text"]}}
    ctx.register_tool("echo", "tools", schema, echo)
"#;

const SCRIPT: &str = "turns:\n  - tool_calls:\n      - name: echo\n        args: {text: \"hi\"}\n  - say: \"got {tool_results}\"\n";

/// One `run` turn calling `echo` with `config_json` as plughost's config;
/// the turn and the log lines of the plugins.
fn turn(config_json: &str) -> (Value, Vec<Value>) {
    let plughost_home = tempfile::tempdir().unwrap();
    let hermes_home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    std::fs::write(
        hermes_home.path().join("config.yaml"),
        "plugins:\n  enabled: [mwplug, toolplug]\n",
    )
    .unwrap();
    let plugins = hermes_home.path().join("plugins");
    write_plugin(
        &plugins,
        "mwplug",
        "name: mwplug\n",
        &[("__init__.py", MIDDLEWARE)],
    );
    write_plugin(
        &plugins,
        "toolplug",
        "name: toolplug\n",
        &[("__init__.py", TOOL)],
    );
    std::fs::write(plughost_home.path().join("config.json"), config_json).unwrap();
    let script = plughost_home.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let log = plughost_home.path().join("mw.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["run", "go", "--json", "--model", "scripted", "--script"])
        .arg(&script)
        .env("PLUGHOST_HOME", plughost_home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes_home.path())
        .env("MW_LOG", &log)
        .env_remove("PLUGHOST_ISOLATE")
        .env_remove("PLUGHOST_LOG")
        .env_remove("HERMES_ENABLE_PROJECT_PLUGINS");
    let out = run_bounded(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let turn: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let lines = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (turn, lines)
}

fn check(turn: &Value, log: &[Value]) -> (u64, u64) {
    assert_eq!(
        turn["reply"], "got echo:hi (via wrap) [wrapped]",
        "{turn:#}"
    );
    let echo: Vec<&Value> = log.iter().filter(|l| l["where"] == "echo").collect();
    assert_eq!(echo.len(), 1, "the tool ran once: {log:#?}");
    assert_eq!(echo[0]["text"], "hi (via wrap)");
    let wrap = log.iter().find(|l| l["where"] == "wrap").unwrap();
    assert!(
        wrap["again"]
            .as_str()
            .is_some_and(|a| a.contains("more than once")),
        "{wrap}"
    );
    (
        wrap["pid"].as_u64().unwrap(),
        echo[0]["pid"].as_u64().unwrap(),
    )
}

#[test]
fn an_isolated_middleware_wraps_another_isolated_plugins_tool() {
    let (turn, log) = turn(r#"{"plugins": {}}"#);
    let (middleware, tool) = check(&turn, &log);
    assert_ne!(middleware, tool, "each plugin has a worker of its own");
    assert_ne!(middleware as u32, std::process::id());
}

#[test]
fn a_trusted_middleware_wraps_an_isolated_tool() {
    let (turn, log) = turn(r#"{"plugins": {"trusted": ["mwplug"]}}"#);
    let (middleware, tool) = check(&turn, &log);
    assert_ne!(middleware, tool, "the tool runs in its worker");
}
