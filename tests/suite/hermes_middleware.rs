//! Hermes middleware (`ctx.register_middleware`) written in Hermes's shape
//! (`hermes_cli/middleware.py`), through `plughost run` with the scripted
//! model: `tool_request` replaces a call's arguments before `pre_tool_call`
//! sees them, `tool_execution` wraps the handler (a failing one is skipped),
//! `llm_request` rewrites the model call, and an `llm_execution` middleware
//! raising `LLMExecutionBlocked` stops the call before the rest of the chain.

use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

const PLUGIN: &str = r#"
import json, os
from hermes_cli.middleware import LLMExecutionBlocked

def _log(event, **fields):
    with open(os.environ["MW_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")

def echo(args, **kwargs):
    return "echo:" + args["text"]

def guard(tool_name, args, **kwargs):
    _log("pre_tool_call", args=args)

def rewrite_args(tool_name, args, original_args, **kwargs):
    _log("tool_request", tool=tool_name, schema=kwargs.get("middleware_schema_version"))
    if tool_name == "echo":
        return {"args": {"text": args["text"] + " (rewritten)"}}

def broken(tool_name, args, next_call, **kwargs):
    raise RuntimeError("broken middleware")

def wrap(tool_name, args, next_call, **kwargs):
    result = next_call(args)
    return result + " [wrapped]"

def rename_model(request, **kwargs):
    request = dict(request)
    request["model"] = "rewritten-model"
    return {"request": request}

def budget_guard(request, next_call, session_id, **kwargs):
    last = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    if "over budget" in last:
        raise LLMExecutionBlocked("budget exceeded", metadata={"budget_usd": 5.0})
    return next_call(request)

def inner(request, next_call, **kwargs):
    _log("llm_execution", model=request["model"])
    return next_call(request)

def register(ctx):
    schema = {"name": "echo", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}
    ctx.register_tool("echo", "mw", schema, echo)
    ctx.register_hook("pre_tool_call", guard)
    ctx.register_middleware("tool_request", rewrite_args)
    ctx.register_middleware("tool_execution", broken)
    ctx.register_middleware("tool_execution", wrap)
    ctx.register_middleware("llm_request", rename_model)
    ctx.register_middleware("llm_execution", budget_guard)
    ctx.register_middleware("llm_execution", inner)
    ctx.register_middleware("no_such_kind", wrap)
"#;

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: echo
        args: {text: "hi"}
  - say: "got {tool_results}"
"#;

struct Env {
    plughost_home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            plughost_home: tempfile::tempdir().unwrap(),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            env.hermes_home.path().join("config.yaml"),
            "plugins:\n  enabled: [mw]\n",
        )
        .unwrap();
        let plugins = env.hermes_home.path().join("plugins");
        write_plugin(&plugins, "mw", "name: mw\n", &[("__init__.py", PLUGIN)]);
        env
    }

    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.plughost_home.path().join("mw.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn run(&self, message: &str) -> (Output, Value) {
        let script = self.plughost_home.path().join("script.yaml");
        std::fs::write(&script, SCRIPT).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(["run", message, "--json", "--model", "scripted", "--script"])
            .arg(&script)
            .env("PLUGHOST_HOME", self.plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env("MW_LOG", self.plughost_home.path().join("mw.log"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE");
        let out = run_bounded(cmd, Duration::from_secs(60));
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, json)
    }
}

#[test]
fn middleware_rewrites_and_wraps_tool_and_model_calls() {
    let env = Env::new();
    let (out, turn) = env.run("say hi");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        turn["reply"], "got echo:hi (rewritten) [wrapped]",
        "{turn:#}\n{err}"
    );
    let log = env.log();
    let events: Vec<&str> = log.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        events,
        [
            "llm_execution",
            "tool_request",
            "pre_tool_call",
            "llm_execution"
        ],
        "{log:#?}"
    );
    // pre_tool_call saw the arguments tool_request made.
    assert_eq!(
        log[2]["args"],
        serde_json::json!({"text": "hi (rewritten)"})
    );
    assert_eq!(log[1]["schema"], "hermes.middleware.v1");
    // llm_request's model reached the call, and llm_execution saw it.
    assert_eq!(log[0]["model"], "rewritten-model");
    for call in turn["model_calls"].as_array().unwrap() {
        assert_eq!(call["model"], "rewritten-model", "{call:#}");
    }
    assert!(err.contains("broken middleware"), "{err}");
    assert!(err.contains("no_such_kind"), "{err}");
}

#[test]
fn llm_execution_blocked_stops_the_call_and_the_rest_of_the_chain() {
    let env = Env::new();
    let (_out, turn) = env.run("I am over budget");
    let reply = turn["reply"].as_str().unwrap();
    assert!(
        reply.contains("LLM call blocked by budget_guard: budget exceeded"),
        "{turn:#}"
    );
    // The middleware after the block, and so the provider, never ran.
    assert!(env.log().is_empty(), "{:#?}", env.log());
    assert!(turn["tool_calls"].as_array().is_none_or(|c| c.is_empty()));
}
