//! Hermes Agent plugins, unmodified: written here in the Hermes style
//! (positional `register_tool`, `handler(args, **kwargs)` returning JSON,
//! kwargs hooks with dict answers, `hermes_constants`), found under a
//! temporary `HERMES_HOME` and run through the CLI and agent turns.
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::write_plugin;
use serde_json::Value;

/// A plugin in the Hermes style: tools, kwargs hooks with dict answers.
const TOOLKIT: &str = r#"
import json
from hermes_constants import get_hermes_home

SCHEMA = {"name": "lookup", "description": "Look a word up",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}

def lookup(args, **kwargs):
    return json.dumps({"q": args["q"], "len": len(args["q"]), "task_id": kwargs.get("task_id")})

def boom(args, **kwargs):
    raise ValueError("no such word")

def untyped(args, **kwargs):
    return {"not": "a string"}

async def later(args, **kwargs):
    return json.dumps({"awaited": True})

def home(args, **kwargs):
    return json.dumps({"home": str(get_hermes_home())})

def on_llm(session_id, user_message, **kwargs):
    return {"context": "hermes says hi"}

def shout(tool_name, result):          # narrow: only what it declares
    if tool_name == "lookup":
        return result.upper()
    return None

async def observe(**kwargs):
    return None

def register(ctx):
    assert ctx.manifest.name == "toolkit" and ctx.manifest.key == "toolkit"
    ctx.register_tool("lookup", "words", SCHEMA, lookup)
    ctx.register_tool(name="boom", toolset="words", schema={"name": "boom", "parameters": {"type": "object", "properties": {}}}, handler=boom)
    ctx.register_tool("untyped", "words", {"name": "untyped"}, untyped)
    ctx.register_tool("later", "words", {"name": "later"}, later, is_async=True)
    ctx.register_tool("hermes_home", "words", {"name": "hermes_home"}, home)
    ctx.register_tool("gated", "words", {"name": "gated"}, lookup, requires_env=["PLUGHOST_TEST_UNSET_VAR"])
    ctx.register_tool("read_file", "words", {"name": "read_file"}, lookup)   # no override: refused
    ctx.register_hook("pre_llm_call", on_llm)
    ctx.register_hook("transform_tool_result", shout)
    ctx.register_hook("post_tool_call", observe)
    ctx.register_hook("transform_llm_output", observe)   # Hermes-only: never fires
    ctx.register_web_search_provider(object())            # accepted, not used
    ctx.register_command("words", lambda raw: f"words: {raw}", description="Words", args_hint="[q]")
"#;

/// A `pre_tool_call` guard that blocks reading secrets (dict answer),
/// rewrites another call's arguments (`modify`), and one that raises.
const GUARD: &str = r#"
def guard(tool_name, args, **kwargs):
    if tool_name == "read_file" and "secret" in args.get("path", ""):
        return {"action": "block", "message": "secrets stay secret"}
    if tool_name == "read_file" and args.get("path") == "decoy.txt":
        return {"action": "modify", "args": {"path": "public.txt"}}
    return None

def register(ctx):
    ctx.register_hook("pre_tool_call", guard)
"#;

const BROKEN_GUARD: &str = r#"
def guard(tool_name, **kwargs):
    if tool_name == "read_file":
        raise RuntimeError("policy store unreachable")

def register(ctx):
    ctx.register_hook("pre_tool_call", guard)
"#;

struct Env {
    plughost_home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new(config_yaml: &str) -> Env {
        let env = Env {
            plughost_home: tempfile::tempdir().unwrap(),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        std::fs::write(env.hermes_home.path().join("config.yaml"), config_yaml).unwrap();
        env
    }

    fn plugins(&self) -> std::path::PathBuf {
        self.hermes_home.path().join("plugins")
    }

    fn plugin(&self, dir: &str, manifest: &str, init: &str) {
        write_plugin(&self.plugins(), dir, manifest, &[("__init__.py", init)]);
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE")
            .env_remove("PLUGHOST_TEST_UNSET_VAR");
        cmd
    }

    /// Run the CLI, failing the test instead of hanging past `limit`.
    fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.command(args), Duration::from_secs(60))
    }

    fn list(&self) -> Vec<Value> {
        let out = self.run(&["plugins", "list", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("plughost did not finish within {limit:?}");
        }
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn record<'a>(list: &'a [Value], key: &str) -> &'a Value {
    list.iter()
        .find(|p| p["key"] == key)
        .unwrap_or_else(|| panic!("no plugin '{key}' in {list:#?}"))
}

#[test]
fn discovery_and_config_yaml_enablement() {
    let env = Env::new(
        "model: x\nplugins:\n  enabled: [toolkit, image_gen/fancy, off-yaml, off-json, bare]\n  disabled: [off-yaml]\n",
    );
    env.plugin("toolkit", "name: toolkit\nversion: '1.2'\n", TOOLKIT);
    env.plugin(
        "image_gen/fancy",
        "name: fancy\n",
        "def register(ctx):\n    pass\n",
    );
    env.plugin(
        "off-yaml",
        "name: off-yaml\n",
        "def register(ctx):\n    pass\n",
    );
    env.plugin(
        "off-json",
        "name: off-json\n",
        "def register(ctx):\n    pass\n",
    );
    env.plugin(
        "idle",
        "name: idle\n",
        "def register(ctx):\n    raise SystemExit('must not load')\n",
    );
    env.plugin(
        "memory-thing",
        "name: memory-thing\n",
        "from x import MemoryProvider\ndef register(ctx):\n    pass\n",
    );
    // Enabled through plughost's own config.json rather than config.yaml.
    env.plugin(
        "json-on",
        "name: json-on\n",
        "def register(ctx):\n    pass\n",
    );
    // A category directory nested too deep is not scanned.
    env.plugin("a/b/c", "name: deep\n", "def register(ctx):\n    pass\n");
    std::fs::write(
        env.plughost_home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["json-on", "memory-thing"], "disabled": ["off-json"]}}"#,
    )
    .unwrap();

    let list = env.list();
    let toolkit = record(&list, "toolkit");
    assert_eq!(toolkit["dialect"], "hermes", "{toolkit:#}");
    assert_eq!(toolkit["status"], "loaded", "{toolkit:#}");
    assert_eq!(toolkit["version"], "1.2");
    assert!(toolkit["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "lookup"));
    let fancy = record(&list, "image_gen/fancy");
    assert_eq!(fancy["status"], "loaded", "{fancy:#}");
    assert_eq!(fancy["dialect"], "hermes");
    assert_eq!(record(&list, "off-yaml")["status"], "disabled");
    assert_eq!(record(&list, "off-json")["status"], "disabled");
    let idle = record(&list, "idle");
    assert_eq!(idle["status"], "not-enabled");
    assert!(
        idle["error"].as_str().unwrap().contains("plugins.enabled"),
        "{idle:#}"
    );
    assert_eq!(record(&list, "json-on")["status"], "loaded");
    let memory = record(&list, "memory-thing");
    assert_eq!(memory["status"], "skipped", "{memory:#}");
    assert!(memory["error"].as_str().unwrap().contains("exclusive"));
    assert!(!list
        .iter()
        .any(|p| p["key"] == "a/b/c" || p["name"] == "deep"));
}

#[test]
fn project_plugins_only_when_hermes_enables_them() {
    let env = Env::new("plugins:\n  enabled: [proj]\n");
    let project = tempfile::tempdir().unwrap();
    write_plugin(
        &project.path().join(".hermes").join("plugins"),
        "proj",
        "name: proj\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    let list = |on: bool| -> Vec<Value> {
        let mut cmd = env.command(&["plugins", "list", "--json"]);
        cmd.current_dir(project.path());
        if on {
            cmd.env("HERMES_ENABLE_PROJECT_PLUGINS", "true");
        }
        let out = run_bounded(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    assert!(!list(false).iter().any(|p| p["key"] == "proj"));
    let on = list(true);
    let proj = record(&on, "proj");
    assert_eq!(proj["source"], "project");
    assert_eq!(proj["status"], "loaded");
}

fn tool_call(env: &Env, name: &str, args: &str) -> (bool, String) {
    let out = env.run(&["tools", "call", name, "--args", args]);
    (out.status.success(), stdout(&out).trim_end().to_string())
}

#[test]
fn hermes_tools_get_args_and_answer_json() {
    let env = Env::new("plugins:\n  enabled: [toolkit]\n");
    env.plugin("toolkit", "name: toolkit\n", TOOLKIT);

    // handler(args, **kwargs), a JSON string back, through transform_tool_result
    // (a narrow callback given only the keywords it declares).
    let (ok, text) = tool_call(&env, "lookup", r#"{"q": "abc"}"#);
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(&text.to_lowercase()).unwrap();
    assert_eq!(v["q"], "abc");
    assert_eq!(v["len"], 3);

    let (ok, text) = tool_call(&env, "boom", "{}");
    assert!(!ok);
    assert_eq!(
        text,
        r#"{"error":"Tool execution failed: ValueError: no such word"}"#
    );

    let (ok, text) = tool_call(&env, "untyped", "{}");
    assert!(!ok);
    assert_eq!(
        text,
        r#"{"error":"Tool handler returned unsupported result type: dict"}"#
    );

    let (ok, text) = tool_call(&env, "later", "{}");
    assert!(ok, "{text}");
    assert_eq!(text, r#"{"awaited": true}"#);

    let (ok, text) = tool_call(&env, "gated", r#"{"q": "x"}"#);
    assert!(!ok);
    assert!(
        text.starts_with(r#"{"error":"Tool gated is unavailable"#),
        "{text}"
    );

    // hermes_constants.get_hermes_home() is the Hermes home plugins were found in.
    let (ok, text) = tool_call(&env, "hermes_home", "{}");
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        Path::new(v["home"].as_str().unwrap()),
        env.hermes_home.path()
    );

    // Hermes's collision rule: the built-in read_file is not replaced
    // without override=True (it still reads files, not the plugin's lookup).
    let script = env.plughost_home.path().join("read.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: read_file\n        args: {path: \"note.txt\"}\n  - say: done\n",
    )
    .unwrap();
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("note.txt"), "plain note").unwrap();
    let turn = agent_turn(&env, &script, &ws);
    assert_eq!(turn["tool_calls"][0]["result"], "plain note", "{turn:#}");

    // Slash commands keep the (raw_args) convention.
    let out = env.run(&["commands", "run", "/words hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "words: hello");
}

fn agent_turn(env: &Env, script: &Path, workspace: &Path) -> Value {
    let out = env.run(&[
        "run",
        "please read",
        "--json",
        "--model",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        workspace.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

const READS: &str = r#"
turns:
  - tool_calls:
      - name: read_file
        args: {path: "secret.txt"}
      - name: read_file
        args: {path: "decoy.txt"}
  - say: "done: {user_message} | {tool_results}"
"#;

fn guarded_env(guard: &str) -> (Env, std::path::PathBuf, std::path::PathBuf) {
    let env = Env::new("plugins:\n  enabled: [guard, toolkit]\n");
    env.plugin("guard", "name: guard\n", guard);
    env.plugin("toolkit", "name: toolkit\n", TOOLKIT);
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("secret.txt"), "TOPSECRET").unwrap();
    std::fs::write(ws.join("decoy.txt"), "decoy").unwrap();
    std::fs::write(ws.join("public.txt"), "public text").unwrap();
    let script = env.plughost_home.path().join("script.yaml");
    std::fs::write(&script, READS).unwrap();
    (env, ws, script)
}

#[test]
fn a_pre_tool_call_guard_blocks_a_file_read_in_an_agent_turn() {
    let (env, ws, script) = guarded_env(GUARD);
    let turn = agent_turn(&env, &script, &ws);
    let calls = turn["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["outcome"], "blocked", "{turn:#}");
    assert!(calls[0]["result"]
        .as_str()
        .unwrap()
        .contains("secrets stay secret"));
    // modify: the call's arguments are rewritten before the handler runs.
    assert_eq!(calls[1]["outcome"], "ok");
    assert_eq!(calls[1]["result"], "public text");
    let everything = turn.to_string();
    assert!(!everything.contains("TOPSECRET"), "{turn:#}");
    // pre_llm_call's {"context": ...} reached the model's user message.
    assert!(everything.contains("hermes says hi"), "{turn:#}");
}

#[test]
fn a_raising_guard_blocks_too_with_hermes_message() {
    let (env, ws, script) = guarded_env(BROKEN_GUARD);
    let turn = agent_turn(&env, &script, &ws);
    let calls = turn["tool_calls"].as_array().unwrap();
    for call in calls {
        assert_eq!(call["outcome"], "blocked", "{turn:#}");
        assert!(
            call["result"].as_str().unwrap().contains(
                "pre_tool_call plugin callback guard raised RuntimeError: policy store unreachable"
            ),
            "{turn:#}"
        );
    }
    assert!(!turn.to_string().contains("TOPSECRET"));
    // A raising guard on another tool's call does not block it (it returns None there).
    let (ok, text) = tool_call(&env, "lookup", r#"{"q": "x"}"#);
    assert!(ok, "{text}");
}

#[test]
fn broken_hermes_plugins_fail_alone_with_the_reason() {
    let env = Env::new("plugins:\n  enabled: [noreg, badtool, raises, badyaml, toolkit]\n");
    env.plugin("noreg", "name: noreg\n", "X = 1\n");
    env.plugin(
        "badtool",
        "name: badtool\n",
        "def register(ctx):\n    ctx.register_tool('t', 'set', {}, 'not callable')\n",
    );
    env.plugin("raises", "name: raises\n", "def register(ctx):\n    ctx.register_tool('half', 's', {}, lambda a, **k: '1')\n    raise KeyError('missing')\n");
    env.plugin(
        "badyaml",
        "name: [unclosed\n",
        "def register(ctx):\n    pass\n",
    );
    env.plugin("toolkit", "name: toolkit\n", TOOLKIT);
    let list = env.list();
    let noreg = record(&list, "noreg");
    assert_eq!(noreg["status"], "failed");
    assert!(
        noreg["error"].as_str().unwrap().contains("register()"),
        "{noreg:#}"
    );
    let badtool = record(&list, "badtool");
    assert!(
        badtool["error"]
            .as_str()
            .unwrap()
            .contains("handler must be callable"),
        "{badtool:#}"
    );
    let raises = record(&list, "raises");
    assert_eq!(raises["status"], "failed");
    assert!(
        raises["tools"].as_array().unwrap().is_empty(),
        "rolled back: {raises:#}"
    );
    let badyaml = list
        .iter()
        .find(|p| p["path"].as_str().unwrap_or("").ends_with("badyaml"))
        .unwrap();
    assert!(
        badyaml["error"]
            .as_str()
            .unwrap()
            .contains("malformed plugin.yaml"),
        "{badyaml:#}"
    );
    assert_eq!(record(&list, "toolkit")["status"], "loaded");
    // The half-registered tool of the failed plugin is gone.
    let (ok, text) = tool_call(&env, "half", "{}");
    assert!(!ok, "{text}");
}

#[test]
fn a_guard_past_its_budget_blocks_with_hermes_message() {
    let slow = "import asyncio\nasync def guard(tool_name, **kwargs):\n    await asyncio.sleep(30)\n\ndef register(ctx):\n    ctx.register_hook('pre_tool_call', guard)\n";
    let (env, ws, script) = guarded_env(slow);
    let out = env.run(&[
        "run",
        "go",
        "--json",
        "--model",
        "scripted",
        "--hook-timeout",
        "0.3",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &turn["tool_calls"][0];
    assert_eq!(first["outcome"], "blocked", "{turn:#}");
    assert!(first["result"]
        .as_str()
        .unwrap()
        .contains("pre_tool_call plugin callback timed out or is still running"));
    assert!(!turn.to_string().contains("TOPSECRET"));
}

#[test]
fn a_real_hermes_constants_is_never_shadowed() {
    let env = Env::new("plugins:\n  enabled: [toolkit]\n");
    env.plugin("toolkit", "name: toolkit\n", TOOLKIT);
    let real = tempfile::tempdir().unwrap();
    std::fs::write(
        real.path().join("hermes_constants.py"),
        "from pathlib import Path\ndef get_hermes_home():\n    return Path('/the/real/hermes')\n",
    )
    .unwrap();
    let mut cmd = env.command(&["tools", "call", "hermes_home", "--args", "{}"]);
    cmd.env("PYTHONPATH", real.path());
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("/the/real/hermes"),
        "{}",
        stdout(&out)
    );
}
