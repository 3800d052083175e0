//! Hermes Agent plugins, unmodified: written here in the Hermes style
//! (positional `register_tool`, `handler(args, **kwargs)` returning JSON,
//! kwargs hooks with dict answers, `hermes_constants`), found under a
//! temporary `HERMES_HOME` and run through the CLI and agent turns.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
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
    ctx.register_web_search_provider(object())            # not a WebSearchProvider: ignored, as Hermes does
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
    // Hermes's own kinds: a gateway platform (it loads: its adapter runs
    // under serve's gateway) and a model provider (sniffed).
    env.plugin(
        "irc",
        "name: irc\nkind: platform\n",
        "def register(ctx):\n    pass\n",
    );
    env.plugin(
        "prov",
        "name: prov\n",
        "from providers import ProviderProfile\ndef register(ctx):\n    ctx.register_provider(ProviderProfile())\n",
    );
    std::fs::write(
        env.plughost_home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["json-on", "memory-thing", "irc", "prov"], "disabled": ["off-json"]}}"#,
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
    let irc = record(&list, "irc");
    assert_eq!(
        (irc["kind"].as_str(), irc["status"].as_str()),
        (Some("platform"), Some("loaded")),
        "{irc:#}"
    );
    // A model provider is imported (its register(ctx) skipped, as Hermes
    // does): what it registers is a model (tests/suite/hermes_model_provider.rs).
    let p = record(&list, "prov");
    assert_eq!(p["kind"], "model-provider", "{p:#}");
    assert_eq!(p["status"], "loaded", "{p:#}");
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

/// A plugin in the style of Hermes's bridge plugins: it keeps `ctx` and
/// uses `dispatch_tool`, `llm` and `inject_message` from a tool handler.
const BRIDGE: &str = r#"
import json
_CTX = None

def relay(args, **kwargs):
    ctx = _CTX
    out = {"inner": ctx.dispatch_tool("lookup", {"q": args["q"]}, task_id=kwargs.get("task_id")),
           "secret": ctx.dispatch_tool("read_file", {"path": "secret.txt"}),
           "missing": ctx.dispatch_tool("no_such_tool", {})}
    try:
        r = ctx.llm.complete([{"role": "user", "content": "summarise " + args["q"]}], purpose="relay")
        out["llm"] = {"text": r.text, "provider": r.provider, "model": r.model}
    except RuntimeError as e:
        out["llm_error"] = str(e)
    try:
        ctx.llm.complete([{"role": "user", "content": "x"}], model="other")
    except PermissionError as e:
        out["trust"] = str(e)
    out["queued"] = ctx.inject_message("remember the relay")
    return json.dumps(out)

def register(ctx):
    global _CTX
    _CTX = ctx
    ctx.register_tool("relay", "bridge", {"name": "relay", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}, relay)
"#;

#[test]
fn dispatch_tool_llm_and_inject_message_reach_the_agent() {
    let env = Env::new("plugins:\n  enabled: [bridge, toolkit, guard]\n");
    env.plugin("bridge", "name: bridge\n", BRIDGE);
    env.plugin("toolkit", "name: toolkit\n", TOOLKIT);
    env.plugin("guard", "name: guard\n", GUARD);
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("secret.txt"), "TOPSECRET").unwrap();
    let script = env.plughost_home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - say: \"model heard: {user_message}\"\n    tool_calls:\n      - name: relay\n        args: {q: abc}\n  - say: \"done\"\n",
    )
    .unwrap();
    let turn = agent_turn(&env, &script, &ws);
    let call = &turn["tool_calls"][0];
    assert_eq!(call["outcome"], "ok", "{turn:#}");
    let v: Value = serde_json::from_str(call["result"].as_str().unwrap()).unwrap();
    // dispatch_tool runs the pipeline: the other plugin's transform hook
    // upper-cases lookup's result, the guard blocks the secret read.
    let inner: Value = serde_json::from_str(&v["inner"].as_str().unwrap().to_lowercase()).unwrap();
    assert_eq!(inner["q"], "abc", "{v:#}");
    assert_eq!(v["secret"], r#"{"error":"secrets stay secret"}"#, "{v:#}");
    assert_eq!(v["missing"], r#"{"error":"Unknown tool: no_such_tool"}"#);
    // ctx.llm: the agent's model (scripted), in a conversation of its own.
    assert_eq!(v["llm"]["text"], "model heard: summarise abc", "{v:#}");
    assert_eq!(v["llm"]["model"], "scripted", "{v:#}");
    assert!(
        v["trust"]
            .as_str()
            .unwrap()
            .contains("cannot override the model"),
        "{v:#}"
    );
    // inject_message: the message joins the conversation at the next iteration.
    assert_eq!(v["queued"], true);
    let messages = turn["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == "remember the relay"),
        "{turn:#}"
    );
    assert!(!turn.to_string().contains("TOPSECRET"));

    // Without an agent (tools call) they say so instead of pretending.
    let (ok, text) = tool_call(&env, "relay", r#"{"q": "x"}"#);
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(
        v["inner"].as_str().unwrap().contains("no agent is running"),
        "{v:#}"
    );
    assert!(
        v["llm_error"]
            .as_str()
            .unwrap()
            .contains("no agent is running"),
        "{v:#}"
    );
    assert_eq!(v["queued"], false);
}

/// Gateway answers in the Hermes style: skip, rewrite, allow.
const GATEWAY: &str = r#"
def gate(event, **kwargs):
    text = event.text
    if text.startswith("spam"):
        return {"action": "skip", "reason": "spam filtered"}
    if text.startswith("hi"):
        return {"action": "rewrite", "text": "rewritten: " + text}
    if text.startswith("ok"):
        return {"action": "allow"}
    return None

def register(ctx):
    ctx.register_hook("pre_gateway_dispatch", gate)
"#;

#[test]
fn gateway_answers_skip_rewrite_and_allow_in_an_agent_turn() {
    let env = Env::new("plugins:\n  enabled: [gate]\n");
    env.plugin("gate", "name: gate\n", GATEWAY);
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = env.plughost_home.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - say: \"heard: {user_message}\"\n").unwrap();
    let turn_of = |text: &str| -> Value {
        let out = env.run(&[
            "run",
            text,
            "--json",
            "--model",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--session",
            text.split(' ').next().unwrap(),
        ]);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&out), stderr(&out)))
    };
    let skipped = turn_of("spam offer");
    assert_eq!(skipped["skipped"], "spam filtered", "{skipped:#}");
    // A skipped message never reaches the model: no iteration, nothing
    // stored in the transcript, no model call, no reply.
    assert_eq!(skipped["iterations"], 0, "{skipped:#}");
    assert_eq!(skipped["messages"], serde_json::json!([]), "{skipped:#}");
    assert_eq!(skipped["model_calls"], serde_json::json!([]), "{skipped:#}");
    assert_eq!(skipped["reply"], Value::Null, "{skipped:#}");
    let rewritten = turn_of("hi there");
    assert_eq!(
        rewritten["reply"], "heard: rewritten: hi there",
        "{rewritten:#}"
    );
    let allowed = turn_of("ok go");
    assert_eq!(allowed["reply"], "heard: ok go", "{allowed:#}");
}

/// `pre_tool_call` answering `{"action": "allow"}` (or anything but block
/// and modify) lets the call run unchanged.
#[test]
fn an_allow_answer_lets_the_call_run() {
    let allow = "def guard(tool_name, args, **kwargs):\n    return {'action': 'allow'}\n\ndef register(ctx):\n    ctx.register_hook('pre_tool_call', guard)\n";
    let (env, ws, script) = guarded_env(allow);
    let turn = agent_turn(&env, &script, &ws);
    let calls = turn["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["outcome"], "ok", "{turn:#}");
    assert_eq!(calls[0]["result"], "TOPSECRET");
    assert_eq!(calls[1]["result"], "decoy");
}

#[test]
fn the_dialect_is_chosen_by_config_then_origin_then_imports() {
    let env = Env::new("plugins:\n  enabled: []\n");
    let plugins = env.plughost_home.path().join("plugins");
    // In plughost's own directory: Hermes-style, told by its imports.
    write_plugin(
        &plugins,
        "sniffed",
        "name: sniffed\n",
        &[("__init__.py", "import json\nfrom hermes_constants import get_hermes_home\n\ndef h(args, **kw):\n    return json.dumps({'got': args['x']})\n\ndef register(ctx):\n    ctx.register_tool('sniffed_tool', 'set', {'name': 'sniffed_tool'}, h)\n")],
    );
    // Hermes-style without a telling import: chosen by config.json.
    write_plugin(
        &plugins,
        "told",
        "name: told\n",
        &[("__init__.py", "import json\n\ndef h(args, **kw):\n    return json.dumps({'told': args['x']})\n\ndef register(ctx):\n    ctx.register_tool('told_tool', 'set', {'name': 'told_tool'}, h)\n")],
    );
    // Flowly's own style stays flowly.
    write_plugin(
        &plugins,
        "plain",
        "name: plain\n",
        &[("__init__.py", "def register(ctx):\n    ctx.register_tool('plain_tool', {'type': 'object', 'properties': {}}, lambda params: 'plain')\n")],
    );
    let config = serde_json::json!({"plugins": {
        "enabled": ["sniffed", "told", "plain", "wrong"],
        "dialects": {"told": "hermes", "wrong": "klingon"}}});
    std::fs::write(
        env.plughost_home.path().join("config.json"),
        config.to_string(),
    )
    .unwrap();
    write_plugin(
        &plugins,
        "wrong",
        "name: wrong\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    let list = env.list();
    assert_eq!(record(&list, "sniffed")["dialect"], "hermes", "{list:#?}");
    assert_eq!(record(&list, "told")["dialect"], "hermes");
    assert_eq!(record(&list, "plain")["dialect"], "flowly");
    let wrong = record(&list, "wrong");
    assert_ne!(wrong["status"], "loaded");
    assert!(
        wrong["error"]
            .as_str()
            .unwrap()
            .contains("plugins.dialects.wrong")
            && wrong["error"].as_str().unwrap().contains("klingon"),
        "{wrong:#}"
    );
    let (ok, text) = tool_call(&env, "told_tool", r#"{"x": 1}"#);
    assert!(ok, "{text}");
    assert_eq!(text, r#"{"told": 1}"#);
    let (ok, text) = tool_call(&env, "sniffed_tool", r#"{"x": 2}"#);
    assert!(ok, "{text}");

    // plugins install --dialect records the choice; a bad name is refused first.
    let src = tempfile::tempdir().unwrap();
    write_plugin(
        src.path(),
        "fromgit",
        "name: fromgit\n",
        &[("__init__.py", "import json\n\ndef h(args, **kw):\n    return json.dumps(args)\n\ndef register(ctx):\n    ctx.register_tool('fromgit_tool', 'set', {'name': 'fromgit_tool'}, h)\n")],
    );
    let path = src.path().join("fromgit");
    let out = env.run(&[
        "plugins",
        "install",
        path.to_str().unwrap(),
        "--dialect",
        "klingon",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("use one of: flowly, hermes"),
        "{}",
        stderr(&out)
    );
    assert!(!plugins.join("fromgit").exists());
    let out = env.run(&[
        "plugins",
        "install",
        path.to_str().unwrap(),
        "--dialect",
        "hermes",
        "--enable",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(env.plughost_home.path().join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["plugins"]["dialects"]["fromgit"], "hermes");
    assert_eq!(config["plugins"]["dialects"]["told"], "hermes");
    assert_eq!(record(&env.list(), "fromgit")["dialect"], "hermes");
    let (ok, text) = tool_call(&env, "fromgit_tool", r#"{"y": 3}"#);
    assert!(ok, "{text}");
    assert_eq!(text, r#"{"y": 3}"#);
}

/// Hermes-only hooks plughost's loop fires, logging what they were given.
const OBSERVER: &str = r#"
import json, os

def _log(hook, **fields):
    with open(os.environ["HERMES_TEST_LOG"], "a") as f:
        f.write(json.dumps({"hook": hook, **fields}) + "\n")

def shout(response_text, session_id, model, platform):   # narrow
    _log("transform_llm_output", text=response_text, platform=platform)
    return response_text.upper()

def started(parent_session_id, child_goal, **kwargs):
    _log("subagent_start", parent=parent_session_id, goal=child_goal)

def stopped(**kwargs):
    _log("subagent_stop", status=kwargs.get("child_status"))

def reset(session_id, platform):
    _log("on_session_reset", session=session_id)

async def api_error(error, **kwargs):
    _log("api_request_error", error=error)

def never(**kwargs):
    _log("pre_approval_request")

def register(ctx):
    ctx.register_hook("transform_llm_output", shout)
    ctx.register_hook("subagent_start", started)
    ctx.register_hook("subagent_stop", stopped)
    ctx.register_hook("on_session_reset", reset)
    ctx.register_hook("api_request_error", api_error)
    ctx.register_hook("pre_approval_request", never)
    ctx.register_image_gen_provider(object())
"#;

#[test]
fn hermes_only_hooks_fire_where_the_loop_has_a_place_for_them() {
    let env = Env::new("plugins:\n  enabled: [observer]\n");
    env.plugin("observer", "name: observer\n", OBSERVER);
    let log = env.plughost_home.path().join("hooks.log");
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = env.plughost_home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: delegate\n        args: {task: \"count to two\", tools: [\"list_dir\"]}\n  - say: \"all done\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut cmd = env.command(args);
        cmd.env("HERMES_TEST_LOG", &log)
            .env("OPENAI_API_KEY", "test");
        run_bounded(cmd, Duration::from_secs(60))
    };
    let common = [
        "--json",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
    ];
    let mut args = vec!["run", "delegate it", "--model", "scripted"];
    args.extend(common);
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(turn["reply"], "ALL DONE", "{turn:#}");
    let mut args = vec!["run", "/new", "--model", "scripted"];
    args.extend(common);
    assert!(run(&args).status.success());
    // A model that cannot be reached (a closed loopback port).
    let mut args = vec![
        "run",
        "hello",
        "--model",
        "openai:m",
        "--base-url",
        "http://127.0.0.1:9/v1",
    ];
    args.extend(common);
    let out = run(&args);
    assert!(!out.status.success(), "{}", stdout(&out));

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |hook: &str| -> Vec<&Value> { lines.iter().filter(|l| l["hook"] == hook).collect() };
    let start = of("subagent_start");
    assert_eq!(start.len(), 1, "{lines:#?}");
    assert_eq!(start[0]["goal"], "count to two");
    assert_eq!(start[0]["parent"], "default");
    assert_eq!(of("subagent_stop")[0]["status"], "completed");
    // The sub-agent's reply and the parent's both went through the transform.
    assert!(of("transform_llm_output")
        .iter()
        .any(|l| l["text"] == "all done" && l["platform"] == "cli"));
    assert_eq!(of("on_session_reset")[0]["session"], "default");
    let api = of("api_request_error");
    assert_eq!(api.len(), 1, "{lines:#?}");
    assert!(!api[0]["error"].as_str().unwrap().is_empty());
    assert!(of("pre_approval_request").is_empty());

    // doctor: the never-firing Hermes hook and the unused registrar are listed.
    let out = env.run(&["plugins", "doctor", "--json"]);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let diag = report["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "observer")
        .unwrap();
    assert_eq!(
        diag["not_used"],
        serde_json::json!(["register_image_gen_provider"])
    );
    let silent = diag["silent_hooks"].as_array().unwrap();
    assert_eq!(silent.len(), 1, "{diag:#}");
    assert_eq!(silent[0]["event"], "pre_approval_request");
    assert!(silent[0]["reason"].as_str().unwrap().contains("Hermes"));
}

/// A plugin importing the Hermes core modules real plugins import.
const COMPAT: &str = r#"
from hermes_cli.config import load_config, cfg_get
from hermes_cli.plugins import VALID_HOOKS, PluginContext
from tools.registry import registry, tool_error, tool_result
from agent.memory_provider import MemoryProvider
from gateway.platforms.base import BasePlatformAdapter

class Memory(MemoryProvider):
    name = "notes"

class Adapter(BasePlatformAdapter):
    pass

def conf(args, **kwargs):
    cfg = load_config()
    return tool_result({"model": cfg_get(cfg, "model", "default"),
                        "missing": cfg_get(cfg, "a", "b", default="d"),
                        "valid": "pre_tool_call" in VALID_HOOKS})

def failing(args, **kwargs):
    return tool_error("nope", code=7)

def via_registry(args, **kwargs):
    return registry.dispatch("conf", {})

def register(ctx):
    assert isinstance(ctx, PluginContext)
    registry.register(name="conf", toolset="compat", schema={"name": "conf"}, handler=conf)
    ctx.register_tool("failing", "compat", {"name": "failing"}, failing)
    ctx.register_tool("via_registry", "compat", {"name": "via_registry"}, via_registry)
    ctx.register_memory_provider(Memory())
    ctx.register_platform("irc", "IRC", lambda cfg: Adapter(cfg), lambda: True)
"#;

#[test]
fn compat_modules_serve_what_hermes_plugins_import() {
    let env = Env::new("model:\n  default: m1\nplugins:\n  enabled: [compat]\n");
    // An explicit kind: Hermes would take a plugin mentioning MemoryProvider
    // for an exclusive memory plugin.
    env.plugin("compat", "name: compat\nkind: standalone\n", COMPAT);
    let (ok, text) = tool_call(&env, "conf", "{}");
    assert!(ok, "{text}");
    assert_eq!(text, r#"{"model": "m1", "missing": "d", "valid": true}"#);
    let (ok, text) = tool_call(&env, "failing", "{}");
    assert!(ok, "{text}");
    assert_eq!(text, r#"{"error": "nope", "code": 7}"#);
    let (_, text) = tool_call(&env, "via_registry", "{}");
    assert!(text.contains("no agent is running"), "{text}");

    let out = env.run(&["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let diag = report["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "compat")
        .unwrap();
    assert_eq!(
        diag["not_used"],
        serde_json::json!(["register_memory_provider"])
    );
    // The platform is registered for serve's gateway; doctor says why it does not start.
    assert!(
        diag["providers"].as_array().unwrap().iter().any(|p| p
            .as_str()
            .unwrap()
            .starts_with("platform irc (IRC): disabled: not enabled")),
        "{diag:#}"
    );

    // A project's own `agent` package wins, and ours never serves its submodules.
    let real = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(real.path().join("agent")).unwrap();
    std::fs::write(
        real.path().join("agent").join("__init__.py"),
        "REAL = True\n",
    )
    .unwrap();
    let mut cmd = env.command(&["plugins", "list", "--json"]);
    cmd.env("PYTHONPATH", real.path());
    let out = run_bounded(cmd, Duration::from_secs(60));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let compat = record(&list, "compat");
    assert_eq!(compat["status"], "failed", "{compat:#}");
    assert!(
        compat["error"]
            .as_str()
            .unwrap()
            .contains("agent.memory_provider"),
        "{compat:#}"
    );
}

/// The module of an entry-point distribution, in the Hermes style.
const EP_MODULE: &str = r#"
import json

def greet(args, **kwargs):
    return json.dumps({"hello": args.get("who", "world")})

def register(ctx):
    assert ctx.manifest.source == "entrypoint", ctx.manifest
    ctx.register_tool("ep_greet", "ep", {"name": "ep_greet", "parameters": {"type": "object", "properties": {"who": {"type": "string"}}}}, greet)
"#;

#[test]
fn entry_point_distributions_in_a_site_directory_are_found() {
    let env = Env::new("plugins:\n  enabled: [epdemo, broken-ep]\n");
    let site = tempfile::tempdir().unwrap();
    write_plugin(
        site.path(),
        "hermes_ep_demo",
        "",
        &[("__init__.py", EP_MODULE)],
    );
    write_plugin(
        site.path(),
        "hermes_ep_demo-1.2.0.dist-info",
        "",
        &[
            ("METADATA", "Metadata-Version: 2.1\nName: hermes-ep-demo\nVersion: 1.2.0\n"),
            (
                "entry_points.txt",
                "[console_scripts]\nnot-ours = x:y\n\n[hermes_agent.plugins]\nepdemo = hermes_ep_demo\nbroken-ep = hermes_ep_demo.nowhere:plugin\nidle = hermes_ep_demo\n",
            ),
        ],
    );
    let list_with_path = || {
        let mut cmd = env.command(&["plugins", "list", "--json"]);
        cmd.env("PYTHONPATH", site.path());
        let out = run_bounded(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    };
    let list = list_with_path();
    let ep = record(&list, "epdemo");
    assert_eq!(ep["source"], "entrypoint", "{ep:#}");
    assert_eq!(ep["dialect"], "hermes");
    assert_eq!(ep["status"], "loaded", "{ep:#}");
    assert_eq!(ep["version"], "1.2.0");
    assert_eq!(ep["tools"], serde_json::json!(["ep_greet"]));
    let broken = record(&list, "broken-ep");
    assert_eq!(broken["status"], "failed");
    assert!(
        broken["error"].as_str().unwrap().contains("nowhere"),
        "{broken:#}"
    );
    assert_eq!(record(&list, "idle")["status"], "not-enabled");
    assert!(list.iter().all(|p| p["key"] != "not-ours"));

    let mut cmd = env.command(&[
        "tools",
        "call",
        "ep_greet",
        "--args",
        r#"{"who": "hermes"}"#,
    ]);
    cmd.env("PYTHONPATH", site.path());
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), r#"{"hello": "hermes"}"#);

    // disabled in Hermes's config.yaml wins over plughost's enabled list.
    std::fs::write(
        env.hermes_home.path().join("config.yaml"),
        "plugins:\n  disabled: [epdemo]\n",
    )
    .unwrap();
    std::fs::write(
        env.plughost_home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["epdemo"]}}"#,
    )
    .unwrap();
    assert_eq!(record(&list_with_path(), "epdemo")["status"], "disabled");
}

/// Build `hermes_venv_demo-0.3.0-py3-none-any.whl` in `dir` (with Python's
/// zipfile: this machine has no `wheel` package for setuptools to build with).
const BUILD_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
out, module = sys.argv[1], sys.argv[2]
files = {
    "hermes_venv_demo/__init__.py": open(module).read(),
    "hermes_venv_demo-0.3.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hermes-venv-demo\nVersion: 0.3.0\n",
    "hermes_venv_demo-0.3.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: plughost-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "hermes_venv_demo-0.3.0.dist-info/entry_points.txt": "[hermes_agent.plugins]\nvenvdemo = hermes_venv_demo\n",
}
record = []
with zipfile.ZipFile(out + "/hermes_venv_demo-0.3.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("hermes_venv_demo-0.3.0.dist-info/RECORD,,")
    z.writestr("hermes_venv_demo-0.3.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;

#[test]
fn an_entry_point_distribution_pip_installed_into_a_venv_is_found() {
    let work = tempfile::tempdir().unwrap();
    let module = work.path().join("module.py");
    std::fs::write(&module, EP_MODULE).unwrap();
    let built = Command::new("python3")
        .args(["-c", BUILD_WHEEL])
        .arg(work.path())
        .arg(&module)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let venv = work.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    // The system pip installs into the venv's interpreter (no network: a local wheel).
    let pip = Command::new("python3")
        .args(["-m", "pip", "--python"])
        .arg(venv.join("bin").join("python"))
        .args(["install", "-q", "--no-index"])
        .arg(work.path().join("hermes_venv_demo-0.3.0-py3-none-any.whl"))
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .unwrap();
    assert!(pip.status.success(), "{}{}", stdout(&pip), stderr(&pip));
    assert!(venv
        .join("lib/python3.11/site-packages/hermes_venv_demo-0.3.0.dist-info/entry_points.txt")
        .is_file());

    let env = Env::new("plugins:\n  enabled: [venvdemo]\n");
    let mut cmd = env.command(&["plugins", "list", "--json"]);
    cmd.env("VIRTUAL_ENV", &venv);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ep = record(&list, "venvdemo");
    assert_eq!(ep["source"], "entrypoint");
    assert_eq!(ep["status"], "loaded", "{ep:#}");
    assert_eq!(ep["version"], "0.3.0");
    // Without the virtualenv it is not there.
    let list = env.list();
    assert!(list.iter().all(|p| p["key"] != "venvdemo"), "{list:#?}");
}

/// `register_cli_command` in the style of Hermes's plugins (`hermes honcho …`).
const CLI_PLUGIN: &str = r#"
import asyncio

def setup(parser):
    sub = parser.add_subparsers(dest="action")
    status = sub.add_parser("status")
    status.add_argument("--verbose", action="store_true")
    sub.add_parser("explode")

async def handle(args):
    await asyncio.sleep(0)
    if args.action == "explode":
        raise RuntimeError("kaboom")
    print(f"honk {args.action} verbose={args.verbose}")
    return 0 if args.action == "status" else 3

def register(ctx):
    ctx.register_cli_command("honk", "Honk things", setup, handle, description="Honk, from a plugin")
"#;

#[test]
fn register_cli_command_is_reachable_as_plughost_hermes() {
    let env = Env::new("plugins:\n  enabled: [honker]\n");
    env.plugin("honker", "name: honker\n", CLI_PLUGIN);
    let out = env.run(&["hermes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "honk  Honk things  (honker)");
    let out = env.run(&["hermes", "honk", "status", "--verbose"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "honk status verbose=True");
    // argparse refuses what the command's parser does not know.
    let out = env.run(&["hermes", "honk", "bogus"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("plughost hermes honk"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["hermes", "honk", "explode"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("Hermes CLI command 'honk' of plugin 'honker' failed: RuntimeError: kaboom"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["hermes", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("no Hermes plugin registered the CLI command 'nosuch' (registered: honk)"),
        "{}",
        stderr(&out)
    );
}

/// A Hermes web search backend, and a probe of the registry plughost's
/// `web_search` tool resolves providers from.
const WEB: &str = r#"
import json
from agent.web_search_provider import WebSearchProvider

class Echo(WebSearchProvider):
    name = "echo-search"
    def is_available(self):
        return True
    def search(self, query, limit=5):
        return {"success": True, "data": {"web": [{"title": query, "url": "https://example.invalid", "description": "", "position": 1}]}}

def probe(args, **kwargs):
    from flowly.agent.tools.web_providers.registry import get_provider
    p = get_provider("echo-search")
    return json.dumps({"found": p is not None, "search": p.search("hermes", 1) if p else None,
                       "extract": p.supports_extract() if p else None})

def register(ctx):
    ctx.register_web_search_provider(Echo())
    ctx.register_tool("probe_web", "web", {"name": "probe_web"}, probe)
"#;

#[test]
fn a_hermes_web_search_provider_joins_the_web_provider_registry() {
    let env = Env::new("plugins:\n  enabled: [web]\n");
    env.plugin("web", "name: web\nkind: backend\n", WEB);
    let (ok, text) = tool_call(&env, "probe_web", "{}");
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["found"], true, "{v:#}");
    assert_eq!(v["search"]["data"]["web"][0]["title"], "hermes");
    assert_eq!(v["extract"], false);
    let list = env.list();
    assert_eq!(record(&list, "web")["status"], "loaded");
}

/// In the layout and style of Hermes's own `plugins/disk-cleanup`
/// (`__init__.py` + a library module imported relatively, hooks with
/// keyword defaults and `**_`, `register_command(name, handler=…,
/// description=…)`, `hermes_constants` with a fallback): it tracks test
/// files `write_file` creates under the Hermes home and deletes them when
/// the turn ends.
const DG_INIT: &str = r#"
from __future__ import annotations
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Set

from . import disk_cleanup as dg

_recent: Dict[str, Set[str]] = {}
_preexisting: Dict[str, Set[str]] = {}
_lock = threading.Lock()

def _on_pre_tool_call(tool_name: str = "", args: Optional[Dict[str, Any]] = None,
                      task_id: str = "", session_id: str = "", tool_call_id: str = "", **_: Any) -> None:
    if tool_name == "write_file" and isinstance(args, dict):
        p = dg.resolve(args.get("path", ""))
        if p.exists():
            with _lock:
                _preexisting.setdefault(session_id, set()).add(str(p))
    return None

def _on_post_tool_call(tool_name: str = "", args: Optional[Dict[str, Any]] = None, result: Any = None,
                       task_id: str = "", session_id: str = "", tool_call_id: str = "", **_: Any) -> None:
    if tool_name != "write_file" or not isinstance(args, dict):
        return
    p = dg.resolve(args.get("path", ""))
    with _lock:
        if str(p) in _preexisting.get(session_id, set()):
            return
    if dg.guess_category(p) == "test" and dg.track(str(p), "test"):
        with _lock:
            _recent.setdefault(session_id, set()).add(str(p))

def _on_session_end(session_id: str = "", completed: bool = True, interrupted: bool = False, **_: Any) -> None:
    with _lock:
        drained = _recent.pop(session_id, set())
        _preexisting.pop(session_id, None)
    if drained:
        summary = dg.quick()
        dg._log(f"AUTO_QUICK (session_end): deleted={summary['deleted']}")

def _handle_slash(raw_args: str) -> Optional[str]:
    argv = raw_args.strip().split()
    if not argv or argv[0] in {"help", "-h", "--help"}:
        return "/disk-cleanup — ephemeral-file cleanup"
    if argv[0] == "status":
        return f"{len(dg.load_tracked())} tracked"
    return f"Unknown subcommand: {argv[0]}"

def register(ctx) -> None:
    ctx.register_hook("pre_tool_call", _on_pre_tool_call)
    ctx.register_hook("post_tool_call", _on_post_tool_call)
    ctx.register_hook("on_session_end", _on_session_end)
    ctx.register_command("disk-cleanup", handler=_handle_slash,
                         description="Track and clean up ephemeral Hermes session files.")
"#;

const DG_LIB: &str = r#"
from __future__ import annotations
import json
from datetime import datetime, timezone
from pathlib import Path

try:
    from hermes_constants import get_hermes_home
except Exception:  # pragma: no cover
    import os
    def get_hermes_home() -> Path:
        val = (os.environ.get("HERMES_HOME") or "").strip()
        return Path(val).resolve() if val else (Path.home() / ".hermes").resolve()

def get_state_dir() -> Path:
    return get_hermes_home() / "disk-cleanup"

def resolve(path_str: str) -> Path:
    p = Path(path_str).expanduser()
    return (p if p.is_absolute() else get_hermes_home() / "work" / p).resolve()

def _log(message: str) -> None:
    d = get_state_dir(); d.mkdir(parents=True, exist_ok=True)
    with open(d / "cleanup.log", "a", encoding="utf-8") as f:
        f.write(f"[{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S}] {message}\n")

def load_tracked():
    f = get_state_dir() / "tracked.json"
    return json.loads(f.read_text()) if f.exists() else []

def save_tracked(items) -> None:
    d = get_state_dir(); d.mkdir(parents=True, exist_ok=True)
    (d / "tracked.json").write_text(json.dumps(items))

def guess_category(p: Path):
    return "test" if p.name.startswith("test_") else None

def track(path_str: str, category: str, silent: bool = True) -> bool:
    path = Path(path_str).resolve()
    if not path.exists():
        return False
    try:
        path.relative_to(get_hermes_home().resolve())
    except ValueError:
        _log(f"REJECT: {path} (outside HERMES_HOME)")
        return False
    items = load_tracked()
    if any(i["path"] == str(path) for i in items):
        return False
    items.append({"path": str(path), "category": category})
    save_tracked(items)
    _log(f"TRACKED: {path} ({category})")
    return True

def quick():
    deleted, keep = 0, []
    for item in load_tracked():
        p = Path(item["path"])
        if item["category"] == "test" and p.exists():
            p.unlink(); deleted += 1
            _log(f"DELETED: {p}")
        elif p.exists():
            keep.append(item)
    save_tracked(keep)
    return {"deleted": deleted, "empty_dirs": 0, "freed": 0, "errors": []}
"#;

#[test]
fn a_plugin_in_hermes_disk_cleanup_style_tracks_and_cleans_in_an_agent_turn() {
    let env = Env::new("plugins:\n  enabled: [disk-cleanup]\n");
    write_plugin(
        &env.plugins(),
        "disk-cleanup",
        "name: disk-cleanup\nversion: 2.0.0\ndescription: Auto-track and clean up ephemeral files\nhooks:\n  - post_tool_call\n  - on_session_end\n",
        &[("__init__.py", DG_INIT), ("disk_cleanup.py", DG_LIB)],
    );
    // The workspace is inside the Hermes home, as Hermes's sessions are.
    let ws = env.hermes_home.path().join("work");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("test_old.py"), "kept: it existed before").unwrap();
    let script = env.plughost_home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: write_file\n        args: {path: \"test_tmp.py\", content: \"x = 1\"}\n      - name: write_file\n        args: {path: \"test_old.py\", content: \"edited\"}\n      - name: write_file\n        args: {path: \"notes.md\", content: \"durable\"}\n  - say: done\n",
    )
    .unwrap();
    let turn = agent_turn(&env, &script, &ws);
    for call in turn["tool_calls"].as_array().unwrap() {
        assert_eq!(call["outcome"], "ok", "{turn:#}");
    }
    // on_session_end ran the cleanup: the new test file is gone, the edited
    // one and the durable one stay.
    assert!(!ws.join("test_tmp.py").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("test_old.py")).unwrap(),
        "edited"
    );
    assert!(ws.join("notes.md").exists());
    let log =
        std::fs::read_to_string(env.hermes_home.path().join("disk-cleanup/cleanup.log")).unwrap();
    assert!(log.contains("AUTO_QUICK (session_end): deleted=1"), "{log}");
    let out = env.run(&["commands", "run", "/disk-cleanup status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "0 tracked");
}

#[test]
fn isolated_hermes_plugins_keep_hermes_results_and_collision_rule() {
    let env = Env::new("plugins:\n  enabled: [toolkit]\n");
    env.plugin("toolkit", "name: toolkit\n", TOOLKIT);
    let (ok, text) = {
        let out = env.run(&["--isolate", "all", "tools", "call", "boom", "--args", "{}"]);
        (out.status.success(), stdout(&out).trim_end().to_string())
    };
    assert!(!ok);
    assert_eq!(
        text,
        r#"{"error":"Tool execution failed: ValueError: no such word"}"#
    );
    // read_file registered without override=True does not replace the built-in.
    let script = env.plughost_home.path().join("read.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: read_file\n        args: {path: \"note.txt\"}\n  - say: done\n",
    )
    .unwrap();
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("note.txt"), "plain note").unwrap();
    let out = env.run(&[
        "--isolate",
        "all",
        "run",
        "read it",
        "--json",
        "--model",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(turn["tool_calls"][0]["result"], "plain note", "{turn:#}");
}

/// Both dialects refuse the same skill names (one shared rule) and each
/// says so in its own words: the messages are contracts.
#[test]
fn skill_name_refusals_keep_each_dialects_words() {
    let env = Env::new("plugins:\n  enabled: [h-colon, h-bad]\n");
    let skill = |name: &str| {
        format!("def register(ctx):\n    ctx.register_skill({name:?}, 'SKILL.md', 'd')\n")
    };
    env.plugin("h-colon", "name: h-colon\n", &skill("ns:guide"));
    env.plugin("h-bad", "name: h-bad\n", &skill("a guide"));
    let plugins = env.plughost_home.path().join("plugins");
    for (key, name) in [("f-colon", "ns:guide"), ("f-bad", "a guide")] {
        write_plugin(
            &plugins,
            key,
            &format!("name: {key}\n"),
            &[("__init__.py", &skill(name)), ("SKILL.md", "# guide\n")],
        );
    }
    std::fs::write(
        env.plughost_home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["f-colon", "f-bad"]}}"#,
    )
    .unwrap();
    let list = env.list();
    let error = |key: &str| {
        let p = record(&list, key);
        assert_eq!(p["status"], "failed", "{p:#}");
        p["error"].as_str().unwrap().to_string()
    };
    assert_eq!(
        error("h-colon"),
        "ValueError: Skill name 'ns:guide' must not contain ':' (the namespace is derived from the plugin name 'h-colon' automatically)."
    );
    assert_eq!(
        error("h-bad"),
        "ValueError: Invalid skill name 'a guide'. Must match [a-zA-Z0-9_-]+."
    );
    assert_eq!(
        error("f-colon"),
        "ValueError: skill name 'ns:guide' must not contain ':'; the 'f-colon:' namespace is added for you"
    );
    assert_eq!(
        error("f-bad"),
        "ValueError: skill name 'a guide' is invalid: use only letters, digits, '_' and '-'"
    );
}

/// A loopback OpenAI-compatible server answering one canned completion
/// (non-streamed JSON) per connection, in order, recording each request
/// body; it stops after the last one.
fn completion_stub(answers: Vec<Value>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for answer in answers {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            record
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            let body = answer.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

fn said(text: &str) -> Value {
    serde_json::json!({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}})
}

/// `ctx.llm.complete_structured` / `acomplete_structured` as Hermes
/// defines them: text and image inputs, a JSON Schema, parsed results.
const STRUCTURED: &str = r#"
import json
from agent.plugin_llm import PluginLlmImageInput, PluginLlmStructuredResult, PluginLlmTextInput

_CTX = None
SCHEMA = {"type": "object", "required": ["total", "currency"],
          "properties": {"total": {"type": "number"}, "currency": {"type": "string"}}}
TEXT = {"type": "text", "text": "x"}

def shown(r):
    return {"parsed": r.parsed, "content_type": r.content_type, "text": r.text,
            "provider": r.provider, "model": r.model, "tokens": r.usage.total_tokens,
            "schema_name": r.audit["schema_name"], "typed": isinstance(r, PluginLlmStructuredResult)}

def failure(e):
    return {"error": f"{type(e).__name__}: {e}"}

def attempt(call):
    try:
        return shown(call())
    except Exception as e:
        return failure(e)

async def read_receipt(args, **kwargs):
    llm = _CTX.llm
    def receipt():
        return llm.complete_structured(
            instructions="Read the receipt.",
            input=[PluginLlmTextInput("Total 12.50 EUR"), PluginLlmImageInput(data=b"\x89PNG")],
            json_schema=SCHEMA, schema_name="receipt", purpose="receipts")
    out = {"fenced": attempt(receipt), "prose": attempt(receipt), "mismatch": attempt(receipt)}
    try:
        out["json_mode"] = shown(await llm.acomplete_structured(
            instructions="List them.", input=[{"type": "text", "text": "a, b"}],
            json_mode=True, system_prompt="You list things."))
    except Exception as e:
        out["json_mode"] = failure(e)
    # Refused before the model is asked:
    out["empty"] = attempt(lambda: llm.complete_structured(instructions="  ", input=[TEXT]))
    out["no_input"] = attempt(lambda: llm.complete_structured(instructions="x", input=[]))
    out["bad_block"] = attempt(lambda: llm.complete_structured(instructions="x", input=[{"type": "audio"}]))
    out["bad_image"] = attempt(lambda: llm.complete_structured(instructions="x", input=[{"type": "image", "data": "not bytes"}]))
    out["bad_schema"] = attempt(lambda: llm.complete_structured(instructions="x", input=[TEXT], json_schema={"type": 12}))
    out["trust"] = attempt(lambda: llm.complete_structured(instructions="x", input=[TEXT], model="other"))
    try:
        await llm.acomplete_structured(instructions="", input=[TEXT])
    except ValueError as e:
        out["async_empty"] = str(e)
    return json.dumps(out)

def register(ctx):
    global _CTX
    _CTX = ctx
    ctx.register_tool("read_receipt", "receipts", {"name": "read_receipt"}, read_receipt, is_async=True)
"#;

#[test]
fn complete_structured_parses_checks_and_refuses_as_hermes_does() {
    let env = Env::new("plugins:\n  enabled: [structured]\n");
    env.plugin("structured", "name: structured\n", STRUCTURED);
    let ws = env.plughost_home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let tool_call = serde_json::json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "read_receipt", "arguments": "{}"}}]}}]});
    let (url, requests) = completion_stub(vec![
        tool_call,
        said("Here it is:\n```json\n{\"total\": 12.5, \"currency\": \"EUR\"}\n```"),
        said("Sorry, I cannot read that receipt."),
        said("{\"total\": 12.5}"),
        said("{\"items\": [\"a\", \"b\"]}"),
        said("done"),
    ]);
    let mut cmd = env.command(&[
        "run",
        "read my receipt",
        "--json",
        "--model",
        "openai:stub-model",
        "--base-url",
        &url,
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    cmd.env("OPENAI_API_KEY", "test-key");
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    let call = &turn["tool_calls"][0];
    assert_eq!(call["outcome"], "ok", "{turn:#}");
    let v: Value = serde_json::from_str(call["result"].as_str().unwrap()).unwrap();

    // A fenced JSON answer is parsed and checked against the schema.
    let fenced = &v["fenced"];
    assert_eq!(
        fenced["parsed"],
        serde_json::json!({"total": 12.5, "currency": "EUR"}),
        "{v:#}"
    );
    assert_eq!(fenced["content_type"], "json");
    assert_eq!(fenced["typed"], true);
    assert_eq!(fenced["provider"], "openai");
    assert_eq!(fenced["model"], "stub-model");
    assert_eq!(fenced["tokens"], 12);
    assert_eq!(fenced["schema_name"], "receipt");
    // Not JSON: the text, nothing parsed (Hermes does not raise here).
    assert_eq!(v["prose"]["parsed"], Value::Null, "{v:#}");
    assert_eq!(v["prose"]["content_type"], "text");
    assert_eq!(v["prose"]["text"], "Sorry, I cannot read that receipt.");
    // JSON that breaks the schema: ValueError naming what is wrong.
    let mismatch = v["mismatch"]["error"].as_str().unwrap();
    assert!(
        mismatch.starts_with("ValueError: Plugin LLM structured output did not match schema: ")
            && mismatch.contains("currency"),
        "{mismatch}"
    );
    assert_eq!(
        v["json_mode"]["parsed"],
        serde_json::json!({"items": ["a", "b"]}),
        "{v:#}"
    );
    assert_eq!(v["json_mode"]["content_type"], "json");
    for (key, error) in [
        (
            "empty",
            "ValueError: complete_structured requires non-empty instructions",
        ),
        (
            "no_input",
            "ValueError: complete_structured requires at least one input block",
        ),
        ("bad_block", "ValueError: Unknown input block type: 'audio'"),
        ("bad_image", "ValueError: image input 'data' must be bytes"),
    ] {
        assert_eq!(v[key]["error"], error, "{key}: {v:#}");
    }
    assert!(
        v["bad_schema"]["error"]
            .as_str()
            .unwrap()
            .starts_with("ValueError: json_schema is not a valid JSON Schema"),
        "{v:#}"
    );
    assert!(
        v["trust"]["error"]
            .as_str()
            .unwrap()
            .starts_with("PluginLlmTrustError: Plugin 'structured' cannot override the model"),
        "{v:#}"
    );
    assert_eq!(
        v["async_empty"],
        "acomplete_structured requires non-empty instructions"
    );
    assert_eq!(turn["reply"], "done", "{turn:#}");

    // What the model was asked: two agent calls and four structured ones
    // (the refused calls never reached it).
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 6, "{requests:#?}");
    let first = &requests[1];
    assert!(first.get("tools").is_none(), "{first:#}");
    assert_eq!(
        first["messages"][0],
        serde_json::json!({"role": "system", "content": "Respond with a single JSON object that matches the requested shape. Do not include prose or markdown fences."})
    );
    let parts = &first["messages"][1]["content"];
    let schema_text = r#"{"properties": {"currency": {"type": "string"}, "total": {"type": "number"}}, "required": ["total", "currency"], "type": "object"}"#;
    assert_eq!(
        parts[0]["text"],
        format!("Read the receipt.\n\nSchema name: receipt\n\nJSON schema:\n{schema_text}"),
        "{first:#}"
    );
    assert_eq!(
        parts[1],
        serde_json::json!({"type": "text", "text": "Total 12.50 EUR"})
    );
    assert_eq!(
        parts[2],
        serde_json::json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}})
    );
    let format = &first["response_format"];
    assert_eq!(format["type"], "json_schema", "{first:#}");
    assert_eq!(format["json_schema"]["name"], "plugin_structured_output");
    assert_eq!(format["json_schema"]["strict"], false);
    assert_eq!(
        format["json_schema"]["schema"]["required"],
        serde_json::json!(["total", "currency"])
    );
    let listing = &requests[4];
    assert_eq!(
        listing["response_format"],
        serde_json::json!({"type": "json_object"})
    );
    assert!(
        listing["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You list things.\n\nRespond with a single JSON object"),
        "{listing:#}"
    );

    // Without an agent the model calls say so.
    let out = env.run(&["tools", "call", "read_receipt", "--args", "{}"]);
    let text = stdout(&out);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(
        v["fenced"]["error"]
            .as_str()
            .unwrap()
            .contains("no agent is running"),
        "{v:#}"
    );
}
