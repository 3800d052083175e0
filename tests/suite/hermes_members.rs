//! The last members of Hermes's `PluginContext` that plughost used to
//! accept and never use (issue 21 item 3), and `pre_command`: plugins in
//! Hermes's shape, installed with `plugins install`, run through the CLI
//! and an agent turn with the scripted model.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded};
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
    ws: PathBuf,
}

impl Env {
    fn new() -> Env {
        let home = home_with(&[]);
        let ws = home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        Env {
            home,
            hermes: tempfile::tempdir().unwrap(),
            bundled: no_bundled(),
            ws,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(90))
    }

    /// `plugins install --enable` a plugin directory (no `--dialect`: it
    /// must be detected as Hermes's).
    fn install(&self, name: &str, init: &str) {
        let src = tempfile::tempdir().unwrap();
        let dir = src.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.yaml"),
            format!("name: {name}\nversion: 1.0.0\n"),
        )
        .unwrap();
        std::fs::write(dir.join("__init__.py"), init).unwrap();
        let out = self.run(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains("Loads as a hermes plugin"), "{said}");
    }

    /// `run INPUT --json` with the scripted model answering `script`.
    fn turn(&self, input: &str, script: &str) -> Value {
        self.turn_with(input, script, &[])
    }

    fn turn_with(&self, input: &str, script: &str, extra: &[&str]) -> Value {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, script).unwrap();
        let mut args = vec![
            "run",
            input,
            "--json",
            "--model",
            "scripted",
            "--script",
            path.to_str().unwrap(),
            "--workspace",
            self.ws.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const SAY_DONE: &str = "turns:\n  - say: \"done\"\n";

/// Writes down every `pre_command` it hears, and answers a directive
/// (Hermes v1 ignores it: the command still runs).
const PRE_COMMAND: &str = r#"
import json
from hermes_constants import get_hermes_home

def heard(**kwargs):
    kwargs.pop("telemetry_schema_version", None)
    with open(get_hermes_home() / "commands.jsonl", "a") as f:
        f.write(json.dumps(kwargs, sort_keys=True) + "\n")
    return {"action": "block", "message": "ignored in v1"}

def register(ctx):
    ctx.register_hook("pre_command", heard)
    ctx.register_command("greet", lambda raw: f"hello {raw}", description="Greet")
"#;

#[test]
fn pre_command_fires_before_a_recognised_command_with_hermes_keywords() {
    let env = Env::new();
    env.install("cmdwatch", PRE_COMMAND);
    let greet = env.turn("/greet  big world", SAY_DONE);
    assert_eq!(greet["reply"], "hello big world", "{greet:#}");
    let clear = env.turn("/clear", SAY_DONE);
    assert_eq!(clear["reply"], "Started a new session.", "{clear:#}");
    // Not recognised: no pre_command.
    let unknown = env.turn("/nosuch thing", SAY_DONE);
    assert!(unknown["reply"]
        .as_str()
        .unwrap()
        .contains("Unknown command"));
    let heard = lines(&env.hermes.path().join("commands.jsonl"));
    assert_eq!(heard.len(), 2, "{heard:#?}");
    assert_eq!(heard[0]["command"], "greet");
    assert_eq!(heard[0]["alias_used"], Value::Null);
    assert_eq!(heard[0]["args_raw"], "big world");
    assert_eq!(heard[0]["surface"], "cli");
    assert_eq!(heard[0]["platform"], "cli");
    assert!(heard[0]["session_key"]
        .as_str()
        .is_some_and(|k| !k.is_empty()));
    assert_eq!(heard[1]["command"], "new");
    assert_eq!(heard[1]["alias_used"], "clear");
    assert_eq!(heard[1]["args_raw"], "");
}

/// A `@doi:` reference provider (and one on a reserved prefix, refused),
/// a terminal backend that records what it runs, and a tool that runs a
/// child through `subagent_lifecycle`; hooks write down what they saw.
const MEMBERS: &str = r#"
import asyncio, json
from hermes_constants import get_hermes_home
from agent.context_references import ContextReferenceProvider
from agent.terminal_env_provider import TerminalEnvironmentProvider
from agent.subagent_lifecycle import SubagentLaunchRequest, SubagentLifecycleError

HOME = get_hermes_home()

def log(name, value):
    with open(HOME / name, "a") as f:
        f.write(json.dumps(value) + "\n")

class Doi(ContextReferenceProvider):
    prefix = "doi"
    async def autocomplete(self, query, *, limit=10):
        return []
    async def expand(self, target):
        await asyncio.sleep(0)
        return f"Paper {target}: Attention Is All You Need"

class Reserved(Doi):
    prefix = "file"

class Environment:
    def __init__(self, cwd):
        self.cwd = cwd
    def execute(self, command, cwd=None, timeout=None, **kwargs):
        log("sandbox.jsonl", {"command": command, "cwd": cwd})
        return {"output": f"sandboxed: {command}", "returncode": 3}
    def cleanup(self):
        log("sandbox.jsonl", {"cleanup": True})

class Sandbox(TerminalEnvironmentProvider):
    @property
    def name(self):
        return "sandbox"
    def is_available(self):
        return True
    def create_environment(self, *, cwd, timeout, task_id="default", **kwargs):
        log("sandbox.jsonl", {"created": cwd, "task": task_id})
        return Environment(cwd)

def spawn_child(args, **kwargs):
    service = CTX.subagent_lifecycle
    handle = service.launch(SubagentLaunchRequest(goal=args["goal"]))
    done = service.wait(handle, timeout_seconds=60)
    result = service.result(handle)
    again = service.cancel(handle, reason="late")
    return json.dumps({"completed": done.completed, "state": result.terminal_state.value,
                       "summary": result.summary, "error": result.error_message, "already_terminal": again.already_terminal,
                       "status": service.status(handle).state.value})

def register(ctx):
    global CTX
    CTX = ctx
    ctx.register_context_reference(Doi())
    ctx.register_context_reference(Reserved())
    ctx.register_context_reference(object())
    ctx.register_terminal_environment_provider(Sandbox())
    try:
        ctx.subagent_lifecycle.launch(SubagentLaunchRequest(goal="too early"))
        log("seen.jsonl", {"outside": "launched"})
    except SubagentLifecycleError as e:
        log("seen.jsonl", {"outside": str(e)})
    ctx.register_hook("pre_llm_call", lambda user_message, **kw: log("seen.jsonl", {"user": user_message}))
    ctx.register_hook("subagent_start", lambda child_goal, **kw: log("seen.jsonl", {"child": child_goal}))
    ctx.register_tool("spawn_child", "members",
                      {"name": "spawn_child", "description": "Run a child",
                       "parameters": {"type": "object", "properties": {"goal": {"type": "string"}}}},
                      spawn_child)
"#;

#[test]
fn context_references_terminal_backends_and_subagent_lifecycle_work_the_hermes_way() {
    let env = Env::new();
    std::fs::write(
        env.hermes.path().join("config.yaml"),
        "terminal:\n  backend: sandbox\n  cwd: /sandbox/work\n",
    )
    .unwrap();
    env.install("members", MEMBERS);
    let script = r#"
turns:
  - tool_calls:
      - name: exec
        args: {command: "echo hi", cwd: "sub"}
      - name: spawn_child
        args: {goal: "count to two"}
  - say: "reply: {tool_results}"
"#;
    let report = env.turn("Summarise @doi:10.1/abc. and @nope:x", script);
    let calls = report["tool_calls"].as_array().unwrap();
    let exec = calls.iter().find(|c| c["name"] == "exec").unwrap();
    assert_eq!(
        exec["result"], "sandboxed: echo hi\n[exit code: 3]",
        "{report:#}"
    );
    let ran = lines(&env.hermes.path().join("sandbox.jsonl"));
    assert_eq!(ran[0]["created"], "/sandbox/work", "{ran:#?}");
    assert_eq!(ran[1]["command"], "echo hi");
    assert_eq!(ran[1]["cwd"], "/sandbox/work/sub");
    assert!(ran.iter().any(|r| r["cleanup"] == true), "{ran:#?}");

    let child = calls.iter().find(|c| c["name"] == "spawn_child").unwrap();
    let child: Value = serde_json::from_str(child["result"].as_str().unwrap()).unwrap();
    assert_eq!(child["state"], "SUCCEEDED", "{child:#}");
    assert_eq!(child["completed"], true);
    assert_eq!(child["status"], "SUCCEEDED");
    assert_eq!(child["already_terminal"], true);
    assert!(
        child["summary"].as_str().unwrap().contains("reply:"),
        "{child:#}"
    );

    let seen = lines(&env.hermes.path().join("seen.jsonl"));
    assert_eq!(
        seen[0]["outside"],
        "No active Hermes parent session is available."
    );
    let user = seen
        .iter()
        .find_map(|s| s["user"].as_str())
        .expect("pre_llm_call saw the user message");
    assert!(
        user.starts_with(
            "Summarise @doi:10.1/abc. and @nope:x\n\n--- Attached Context ---\n\n📌 @doi:10.1/abc."
        ),
        "{user}"
    );
    assert!(
        user.contains("Paper 10.1/abc: Attention Is All You Need"),
        "{user}"
    );
    assert!(
        !user.contains("nope:x:"),
        "an unknown prefix is left alone: {user}"
    );
    assert!(
        seen.iter().any(|s| s["child"] == "count to two"),
        "the child ran as a plughost sub-agent: {seen:#?}"
    );
}

#[test]
fn doctor_says_which_terminal_backend_is_active_and_why_not() {
    let env = Env::new();
    env.install("members", MEMBERS);
    let out = env.run(&["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("context reference @doi: expanded where a user message names @doi:<target>"),
        "{text}"
    );
    assert!(
        text.contains(
            "terminal backend sandbox: not active: the default names 'local', so exec runs locally"
        ),
        "{text}"
    );
    assert!(!text.contains("register_context_reference"), "{text}");
    assert!(!text.contains("never fires"), "{text}");
    assert!(
        !text.contains("register_terminal_environment_provider"),
        "{text}"
    );
}

#[test]
fn an_isolated_plugins_references_and_terminal_backend_work_too() {
    let env = Env::new();
    std::fs::write(
        env.hermes.path().join("config.yaml"),
        "terminal:\n  backend: sandbox\n  cwd: /sandbox/work\n",
    )
    .unwrap();
    env.install("members", MEMBERS);
    let script = "turns:\n  - tool_calls:\n      - name: exec\n        args: {command: \"echo hi\"}\n  - say: \"done\"\n";
    let report = env.turn_with("See @doi:10.2/xyz", script, &["--isolate", "all"]);
    let exec = &report["tool_calls"][0];
    assert_eq!(
        exec["result"], "sandboxed: echo hi\n[exit code: 3]",
        "{report:#}"
    );
    let seen = lines(&env.hermes.path().join("seen.jsonl"));
    let user = seen
        .iter()
        .find_map(|s| s["user"].as_str())
        .expect("pre_llm_call saw the user message");
    assert!(
        user.contains("--- Attached Context ---") && user.contains("Paper 10.2/xyz"),
        "the worker's expansion reached the turn: {user}"
    );
}
