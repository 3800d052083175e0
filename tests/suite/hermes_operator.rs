//! Hermes's operator settings read from Hermes's `config.yaml` (issue 21
//! item 3): `plugins.hook_callback_timeout` bounds a guard as
//! `--hook-timeout` does (the flag wins), `plugins.strict_hooks` refuses a
//! plugin registering what its manifest does not declare,
//! `plugins.load_timeout_seconds` abandons a `register()` past it while
//! the host goes on, and a broken `config.yaml` is reported, never fatal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::Value;

/// Blocks nothing itself: it sleeps far past any budget.
const SLOW_GUARD: &str = r#"
import asyncio
async def guard(tool_name, **kwargs):
    await asyncio.sleep(30)

def register(ctx):
    ctx.register_hook("pre_tool_call", guard)
"#;

/// A Hermes tool, and a hook its manifest does not declare.
const UNDECLARED: &str = r#"
import json
def echo(args, **kwargs):
    return json.dumps({"echo": args.get("text", "")})

def register(ctx):
    ctx.register_tool("echo", "demo",
        {"name": "echo", "description": "Echo", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}},
        echo)
    ctx.register_hook("post_tool_call", lambda **kw: None)
"#;

const HANGS: &str = r#"
import time
def register(ctx):
    time.sleep(4)
"#;

const ECHO_SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: echo
        args: {text: "hi"}
  - say: "done: {tool_results}"
"#;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new(config_yaml: &str) -> Env {
        let env = Env {
            home: home_with(&[]),
            hermes: tempfile::tempdir().unwrap(),
            bundled: no_bundled(),
        };
        std::fs::write(env.hermes.path().join("config.yaml"), config_yaml).unwrap();
        env
    }

    fn plugin(&self, name: &str, manifest: &str, init: &str) {
        let root = self.hermes.path().join("plugins");
        write_plugin(&root, name, manifest, &[("__init__.py", init)]);
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

    fn script(&self, text: &str) -> PathBuf {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// One `run --json` turn with the scripted model, and its stderr.
    fn turn(&self, script: &Path, extra: &[&str]) -> (Value, String) {
        let ws = self.home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut args = vec![
            "run",
            "go",
            "--json",
            "--model",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (serde_json::from_slice(&out.stdout).unwrap(), stderr)
    }

    fn list(&self) -> (Vec<Value>, String) {
        let out = self.run(&["plugins", "list", "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        (listed.as_array().unwrap().clone(), stderr)
    }
}

fn record<'a>(list: &'a [Value], key: &str) -> &'a Value {
    list.iter()
        .find(|p| p["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {list:#?}"))
}

#[test]
fn hook_callback_timeout_bounds_a_guard_and_the_flag_wins() {
    let env = Env::new("plugins:\n  enabled: [guard, echoer]\n  hook_callback_timeout: 0.3\n");
    env.plugin("guard", "name: guard\n", SLOW_GUARD);
    env.plugin("echoer", "name: echoer\n", UNDECLARED);
    let script = env.script(ECHO_SCRIPT);
    let (turn, stderr) = env.turn(&script, &[]);
    let call = &turn["tool_calls"][0];
    assert_eq!(call["outcome"], "blocked", "{turn:#}\n{stderr}");
    assert!(
        call["result"]
            .as_str()
            .unwrap()
            .contains("pre_tool_call plugin callback timed out or is still running"),
        "{turn:#}"
    );
    // 0 is Hermes's "no bound": with a slow guard of 30 s that would hang,
    // so show the flag winning over the file instead: a budget long
    // enough for a quick guard is not the file's 0.3 s.
    let quick = SLOW_GUARD.replace("sleep(30)", "sleep(0.6)");
    env.plugin("guard", "name: guard\n", &quick);
    let (turn, stderr) = env.turn(&script, &["--hook-timeout", "20"]);
    assert_eq!(turn["tool_calls"][0]["outcome"], "ok", "{turn:#}\n{stderr}");
}

#[test]
fn strict_hooks_from_config_yaml_refuses_undeclared_registrations() {
    let env = Env::new("plugins:\n  enabled: [echoer, declared]\n  strict_hooks: true\n");
    env.plugin("echoer", "name: echoer\n", UNDECLARED);
    env.plugin(
        "declared",
        "name: declared\nprovides_tools: [echo2]\nprovides_hooks: [post_tool_call]\n",
        &UNDECLARED.replace("\"echo\"", "\"echo2\""),
    );
    let (list, stderr) = env.list();
    let refused = record(&list, "echoer");
    assert_eq!(refused["status"], "failed", "{refused:#}\n{stderr}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("plugins.strict_hooks in Hermes's config.yaml refuses it"),
        "{refused:#}"
    );
    assert_eq!(record(&list, "declared")["status"], "loaded", "{stderr}");
}

#[test]
fn load_timeout_seconds_abandons_a_hung_register_and_the_host_goes_on() {
    let env = Env::new("plugins:\n  enabled: [hangs, echoer]\n  load_timeout_seconds: 1\n");
    env.plugin("hangs", "name: hangs\n", HANGS);
    env.plugin("echoer", "name: echoer\n", UNDECLARED);
    let (list, stderr) = env.list();
    let hung = record(&list, "hangs");
    assert_eq!(hung["status"], "failed", "{hung:#}\n{stderr}");
    assert!(
        hung["error"]
            .as_str()
            .unwrap()
            .contains("register() did not return within 1 s"),
        "{hung:#}"
    );
    assert_eq!(record(&list, "echoer")["status"], "loaded", "{stderr}");
}

#[test]
fn a_broken_config_yaml_is_reported_and_not_fatal() {
    let env = Env::new("plugins:\n  hook_callback_timeout: [unclosed\n");
    let (_, stderr) = env.list();
    assert!(
        stderr.contains("is not valid YAML")
            && stderr.contains("plugins.hook_callback_timeout, plugins.strict_hooks and plugins.load_timeout_seconds are ignored"),
        "{stderr}"
    );
    // A value of the wrong type is named, and ignored.
    let env = Env::new("plugins:\n  strict_hooks: sometimes\n  load_timeout_seconds: -2\n");
    let (_, stderr) = env.list();
    assert!(
        stderr.contains("plugins.strict_hooks must be true or false"),
        "{stderr}"
    );
    assert!(
        stderr.contains("plugins.load_timeout_seconds must be a positive number of seconds"),
        "{stderr}"
    );
}
