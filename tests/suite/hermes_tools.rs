//! Hermes's names for plughost's built-in tools (issue 21 item 2): a Hermes
//! guard written for `read_file` and `terminal`, installed with `plugins
//! install` from a directory, protects plughost's `read_file` and `exec`
//! in an agent turn; a `modify` on the Hermes view rewrites the real call;
//! `ctx.dispatch_tool("terminal", …)` runs `exec`.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded};
use serde_json::Value;

/// A `.env` guard in the shape of Hermes's own (it knows Hermes's tool
/// names only), a package-manager rewrite for `terminal`, an observer
/// writing down the names and arguments its hooks saw, and a tool that
/// dispatches Hermes's `terminal`.
const GUARD: &str = r#"
import json
from hermes_constants import get_hermes_home

SECRET = ".env"

def guard(tool_name, args, **kwargs):
    if tool_name in ("read_file", "write_file", "patch") and SECRET in args.get("path", ""):
        return {"action": "block", "message": "Blocked: .env files hold secrets"}
    if tool_name == "terminal" and SECRET in args.get("command", ""):
        return {"action": "block", "message": "Blocked: .env files hold secrets"}
    if tool_name == "terminal" and args.get("command", "").startswith("npm "):
        return {"action": "modify", "args": {"command": "echo pnpm " + args["command"][4:]}}
    return None

def seen(tool_name, args, **kwargs):
    with open(get_hermes_home() / "seen.jsonl", "a") as f:
        f.write(json.dumps({"tool": tool_name, "args": args}) + "\n")

def run_terminal(args, **kwargs):
    return dispatch(args)

def register(ctx):
    global dispatch
    dispatch = lambda args: ctx.dispatch_tool("terminal", {"command": args["command"]})
    ctx.register_hook("pre_tool_call", guard)
    ctx.register_hook("post_tool_call", seen)
    ctx.register_tool("via_terminal", "guard",
                      {"name": "via_terminal", "description": "Run through Hermes's terminal",
                       "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
                      run_terminal)
"#;

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: read_file
        args: {path: ".env"}
      - name: exec
        args: {command: "cat .env"}
      - name: exec
        args: {command: "npm install left-pad"}
      - name: edit_file
        args: {path: "notes.txt", old_string: "old", new_string: "new"}
      - name: list_dir
        args: {path: "."}
      - name: via_terminal
        args: {command: "echo dispatched"}
      - name: via_terminal
        args: {command: "cat .env"}
  - say: "done"
"#;

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
        std::fs::write(ws.join(".env"), "API_KEY=TOPSECRET\n").unwrap();
        std::fs::write(ws.join("notes.txt"), "old text\n").unwrap();
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
        run_bounded(cmd, Duration::from_secs(60))
    }

    /// `plugins install --enable` a plugin directory written in a scratch place.
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

    fn turn(&self, script: &str) -> Value {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, script).unwrap();
        let out = self.run(&[
            "run",
            "go",
            "--json",
            "--model",
            "scripted",
            "--script",
            path.to_str().unwrap(),
            "--workspace",
            self.ws.to_str().unwrap(),
        ]);
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

fn seen(hermes: &Path) -> Vec<Value> {
    std::fs::read_to_string(hermes.join("seen.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_hermes_env_guard_protects_plughosts_builtins_under_hermes_names() {
    let env = Env::new();
    env.install("envguard", GUARD);
    let turn = env.turn(SCRIPT);
    let calls = turn["tool_calls"].as_array().unwrap();
    let outcome = |i: usize| calls[i]["outcome"].as_str().unwrap().to_string();
    let result = |i: usize| calls[i]["result"].as_str().unwrap().to_string();

    // read_file .env and exec cat .env: both blocked by the one guard.
    assert_eq!(outcome(0), "blocked", "{turn:#}");
    assert!(result(0).contains("Blocked: .env files hold secrets"));
    assert_eq!(outcome(1), "blocked", "{turn:#}");
    assert!(result(1).contains("Blocked: .env files hold secrets"));
    // modify on the `terminal` view rewrote exec's real command.
    assert_eq!(outcome(2), "ok", "{turn:#}");
    assert!(result(2).contains("pnpm install left-pad"), "{turn:#}");
    // edit_file (Hermes's patch) and list_dir (search_files) still run.
    assert_eq!(outcome(3), "ok", "{turn:#}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("notes.txt")).unwrap(),
        "new text\n"
    );
    assert_eq!(outcome(4), "ok", "{turn:#}");
    // dispatch_tool("terminal") runs exec, through the same guard.
    assert_eq!(outcome(5), "ok", "{turn:#}");
    assert!(result(5).contains("dispatched"), "{turn:#}");
    assert!(
        result(6).contains("Blocked: .env files hold secrets"),
        "{turn:#}"
    );
    assert!(!turn.to_string().contains("TOPSECRET"), "{turn:#}");

    // The hooks saw Hermes's names and argument shapes.
    let seen = seen(env.hermes.path());
    let find = |tool: &str| {
        seen.iter()
            .find(|s| s["tool"] == tool)
            .unwrap_or_else(|| panic!("no {tool} in {seen:#?}"))
            .clone()
    };
    assert!(!seen
        .iter()
        .any(|s| s["tool"] == "exec" || s["tool"] == "edit_file"));
    assert!(
        seen.iter().any(
            |s| s["tool"] == "terminal" && s["args"]["command"] == "echo pnpm install left-pad"
        ),
        "{seen:#?}"
    );
    let patch = find("patch");
    assert_eq!(patch["args"]["mode"], "replace");
    assert_eq!(patch["args"]["old_string"], "old");
    let search = find("search_files");
    assert_eq!(search["args"]["target"], "files");
    assert_eq!(search["args"]["path"], ".");
}

/// `tools list` marks what cannot be used now (issue 21 item 6): a
/// Flowly tool whose `check_fn` says no, a Hermes one likewise, the web
/// tools with no provider; the rest are listed as before.
#[test]
fn tools_list_marks_tools_unavailable_right_now() {
    let env = Env::new();
    let flowly = "def register(ctx):\n    ctx.register_tool('off', {'type': 'object', 'properties': {}}, lambda: 'x', check_fn=lambda: False)\n    ctx.register_tool('on', {'type': 'object', 'properties': {}}, lambda: 'x', requires_env=['PLUGHOST_SURELY_UNSET_VAR'], toolset='made-up')\n";
    let src = tempfile::tempdir().unwrap();
    let dir = common::write_plugin(
        src.path(),
        "fl",
        "name: fl\nversion: 1.0.0\n",
        &[("__init__.py", flowly)],
    );
    let out = env.run(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.install(
        "hm",
        "import json\ndef register(ctx):\n    ctx.register_tool('hoff', 'hm', {'name': 'hoff'}, lambda args, **kw: json.dumps({}), check_fn=lambda: False)\n",
    );
    let out = env.run(&["tools", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let tool = |name: &str| listed.iter().find(|t| t["name"] == name).unwrap().clone();
    for name in ["off", "hoff"] {
        assert_eq!(tool(name)["available"], false, "{listed:#?}");
        assert_eq!(tool(name)["unavailable"], "its check_fn returned False");
    }
    assert_eq!(tool("web_search")["available"], false);
    assert!(tool("web_search")["unavailable"]
        .as_str()
        .unwrap()
        .contains("no web search provider"));
    // requires_env does not gate a Flowly tool; an unknown toolset is `extensions`.
    assert_eq!(tool("on")["available"], true, "{listed:#?}");
    assert_eq!(tool("on")["toolset"], "extensions");
    assert_eq!(tool("read_file")["available"], true);
    let out = env.run(&["tools", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("off ")).unwrap();
    assert!(
        line.contains("(unavailable: its check_fn returned False)"),
        "{text}"
    );
    let out = env.run(&["tools", "call", "on"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "x");
}
