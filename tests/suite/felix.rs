//! Felix plugins, written as a Felix author would (a package with a
//! `felix.plugins` entry point and `register(registry)`), run unmodified:
//! discovered as source trees and as pip-installed distributions, their
//! tools and eight agent-loop hooks observed through `plughost run --json`
//! with a scripted model.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{home_with, no_bundled};
use serde_json::Value;

/// A Felix source tree: `pyproject.toml` + `src/<package>/__init__.py`.
fn felix_tree(
    root: &Path,
    dir: &str,
    entries: &[(&str, &str)],
    package: &str,
    code: &str,
) -> PathBuf {
    let path = root.join(dir);
    std::fs::create_dir_all(path.join("src").join(package)).unwrap();
    let mut toml = format!(
        "[project]\nname = \"{dir}\"\nversion = \"1.2.3\"\ndescription = \"A Felix plugin\"\n\n[project.entry-points.\"felix.plugins\"]\n"
    );
    for (name, value) in entries {
        toml.push_str(&format!("{name} = \"{value}\"\n"));
    }
    std::fs::write(path.join("pyproject.toml"), toml).unwrap();
    std::fs::write(path.join("src").join(package).join("__init__.py"), code).unwrap();
    path
}

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
    pythonpath: Option<PathBuf>,
}

impl Env {
    fn new(enabled: &[&str]) -> Env {
        Env {
            home: home_with(enabled),
            bundled: no_bundled(),
            pythonpath: None,
        }
    }
    fn plugins(&self) -> PathBuf {
        self.home.path().join("plugins")
    }
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS");
        match &self.pythonpath {
            Some(p) => cmd.env("PYTHONPATH", p),
            None => cmd.env_remove("PYTHONPATH"),
        };
        cmd.output().unwrap()
    }
    fn script(&self, text: &str) -> String {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }
    /// `run --json` of `message` with the scripted model.
    fn turn(&self, script: &str, session: &str, message: &str) -> Value {
        let script = self.script(script);
        let out = self.run(&[
            "run",
            "--json",
            "--model",
            "scripted",
            "--script",
            &script,
            "--hook-timeout",
            "0.5",
            "--session",
            session,
            message,
        ]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "no report ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
    fn list(&self) -> Vec<Value> {
        let out = self.run(&["plugins", "list", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array().unwrap().clone()
    }
}

const PLUGIN: &str = r#"
import asyncio, os
from felix_ai.types import ChatMessage
from felix.tools.types import define_tool, ToolOutputDict
from felix.tools.errors import tool_error_output
from felix.storage import register_object_store

MARKS = os.environ.get("FELIX_TEST_MARKS", "")

class Plugin:
    def register_tools(self, register):
        register("felix_echo", lambda: define_tool(
            name="felix_echo", description="Echo the text",
            args_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            handler=lambda a, ctx: f"echo {a['text']} thread={ctx.thread_id} manifest={ctx.manifest_id}"))
        def fail(a):
            raise PermissionError("forbidden: /etc/secret")
        register("felix_fail", lambda: define_tool(name="felix_fail", description="Fails", handler=fail))
        async def touch(a, ctx):
            open(a["path"], "w").write("ran")
            return ToolOutputDict(content="touched")
        register("felix_touch", lambda: define_tool(name="felix_touch", description="Touch a file", handler=touch))
        register("felix_soft_error", lambda: define_tool(name="felix_soft_error", description="Soft error",
            handler=lambda a: tool_error_output("not_found", "[error/not_found] nothing there")))
        register("broken_factory", lambda: 1 / 0)
        register("misnamed", lambda: define_tool(name="other_name", description="x", handler=lambda a: "x"))

def before_turn(messages, ctx):
    return [ChatMessage(role="user", content=f"NOTE for {ctx['thread_id']} ({ctx['manifest_id']})")]

def before_model(request, ctx):
    assert request["messages"][0].role == "system"
    extra = ChatMessage(role="user", content=f"PER-CALL {ctx['purpose']} tools={','.join(sorted(request['tools']))[:40]}")
    return {"messages": request["messages"] + [extra]}

def filter_history(messages, ctx):
    return [m for m in messages if "forget" not in (m.content or "")]

def drop_dropped(response, ctx):
    message = response["message"]
    kept = [c for c in message.tool_calls or [] if c.name != "felix_dropped"]
    if len(kept) == len(message.tool_calls or []):
        return None
    return {"message": ChatMessage(role="assistant", content=message.content, tool_calls=kept)}

def raising_after_model(response, ctx):
    raise ValueError("after_model is broken")

def wrong_after_model(response, ctx):
    return {"message": ChatMessage(role="user", content="not an assistant")}

async def guard(call, ctx):
    if call["name"] == "felix_touch" and call["args"].get("path", "").endswith("blocked.txt"):
        return {"block": True, "reason": "touching blocked.txt is not allowed"}
    if call["name"] == "felix_touch" and call["args"].get("path", "").endswith("default.txt"):
        return {"block": True}
    if call["name"] == "felix_echo" and call["args"].get("text") == "deny":
        return {"deny": True}
    if call["name"] == "felix_echo" and call["args"].get("text") == "allow":
        return {"block": False}
    if call["name"] == "felix_echo" and call["args"].get("text") == "slow":
        await asyncio.sleep(5)
        return {"block": True, "reason": "too late"}
    if call["name"] == "felix_echo" and call["args"].get("text") == "stop":
        return {"block": True, "reason": "stop here", "terminate": True}
    return None

def second_guard(call, ctx):
    if call["name"] == "felix_touch":
        raise AssertionError("second guard must not run after a block")
    return None

def redact(call, result, is_error, ctx):
    if call["name"] == "felix_fail":
        assert is_error is True
        return {"content": "redacted"}
    if call["name"] == "felix_echo":
        return {"content": result + " [first]"}
    return None

def later_wins(call, result, is_error, ctx):
    if call["name"] == "felix_echo":
        assert "[first]" not in result  # every after_tool sees the tool's own result
        return {"content": result + " [second]"}
    return None

def register(registry):
    register_object_store("null", lambda settings: None)
    registry.register_plugin(Plugin())
    registry.register_before_turn(before_turn)
    registry.register_before_model(before_model)
    registry.register_filter_history(filter_history)
    registry.register_after_model(drop_dropped)
    registry.register_after_model(raising_after_model)
    registry.register_after_model(wrong_after_model)
    registry.register_before_tool(guard)
    registry.register_before_tool(second_guard)
    registry.register_after_tool(redact)
    registry.register_after_tool(later_wins)
"#;

fn env_with_plugin() -> Env {
    let env = Env::new(&["probe"]);
    felix_tree(
        &env.plugins(),
        "felix-probe",
        &[("probe", "felix_probe:register")],
        "felix_probe",
        PLUGIN,
    );
    env
}

fn messages_of(call: &Value) -> Vec<String> {
    call["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn tools_hooks_and_their_policies_in_one_turn() {
    let env = env_with_plugin();
    let work = env.home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let touched = work.join("ok.txt");
    let blocked = work.join("blocked.txt");
    let script = format!(
        r#"
turns:
  - say: "Working."
    tool_calls:
      - name: felix_echo
        args: {{text: "hi"}}
      - name: felix_fail
        args: {{}}
      - name: felix_touch
        args: {{path: "{}"}}
      - name: felix_touch
        args: {{path: "{}"}}
      - name: felix_touch
        args: {{path: "{}/default.txt"}}
      - name: felix_echo
        args: {{text: "deny"}}
      - name: felix_echo
        args: {{text: "allow"}}
      - name: felix_echo
        args: {{text: "slow"}}
      - name: felix_soft_error
        args: {{}}
      - name: felix_dropped
        args: {{}}
  - say: "All done."
"#,
        touched.display(),
        blocked.display(),
        work.display()
    );
    let report = env.turn(&script, "t1", "hello");
    assert_eq!(report["completed"], true, "{report:#}");
    assert_eq!(report["ended_by"], "answer");
    assert_eq!(report["reply"], "All done.");

    let calls = report["tool_calls"].as_array().unwrap();
    let by = |i: usize| (&calls[i]["result"], &calls[i]["outcome"]);
    // after_model dropped felix_dropped: it never ran.
    assert_eq!(calls.len(), 9, "{calls:#?}");
    assert!(calls.iter().all(|c| c["name"] != "felix_dropped"));
    // felix_echo: the handler got (parsed, ctx); after_tool answers merged, the later key winning.
    assert_eq!(by(0).0, "echo hi thread=t1 manifest=main [second]");
    // A raising tool: Felix's error text and code; the redaction keeps the tag.
    assert_eq!(by(1).0, "[error/permission_denied] redacted");
    assert_eq!(by(1).1, "raised");
    assert_eq!(by(2).0, "touched");
    assert!(touched.is_file());
    // A block: Felix's exact text, no side effect, the second guard never ran.
    assert_eq!(
        by(3).0,
        "[error/blocked] touching blocked.txt is not allowed"
    );
    assert_eq!(by(3).1, "blocked");
    assert!(!blocked.exists());
    assert_eq!(by(4).0, "[error/blocked] blocked by before_tool hook");
    // A misspelt block and an explicit allow both let the call through.
    assert_eq!(by(5).0, "echo deny thread=t1 manifest=main [second]");
    assert_eq!(by(6).0, "echo allow thread=t1 manifest=main [second]");
    // A guard past --hook-timeout is skipped: the call goes through.
    assert_eq!(by(7).0, "echo slow thread=t1 manifest=main [second]");
    // tool_error_output: its content, as an error.
    assert_eq!(by(8).0, "[error/not_found] nothing there");
    assert_eq!(by(8).1, "raised");

    // before_turn accumulates (once in call 1, twice in call 2); before_model is per call.
    let model_calls = report["model_calls"].as_array().unwrap();
    assert_eq!(model_calls.len(), 2);
    let first = messages_of(&model_calls[0]);
    let second = messages_of(&model_calls[1]);
    let count = |m: &[String], s: &str| m.iter().filter(|c| c.starts_with(s)).count();
    assert_eq!(count(&first, "NOTE for t1 (main)"), 1, "{first:#?}");
    assert_eq!(count(&second, "NOTE for t1 (main)"), 2, "{second:#?}");
    assert_eq!(count(&first, "PER-CALL turn tools="), 1);
    assert_eq!(count(&second, "PER-CALL turn tools="), 1);
    assert_eq!(first.last().unwrap().split(' ').next(), Some("PER-CALL"));
    // None of it is stored.
    let transcript = std::fs::read_to_string(env.home.path().join("sessions/t1.jsonl")).unwrap();
    assert!(!transcript.contains("NOTE for") && !transcript.contains("PER-CALL"));
    assert!(
        !transcript.contains("felix_dropped"),
        "the stored reply is after_model's"
    );

    // Failed hook calls, each named.
    let errors = report["hook_errors"].as_array().unwrap();
    let find = |event: &str, needle: &str| {
        errors
            .iter()
            .find(|e| e["event"] == event && e["error"].as_str().unwrap().contains(needle))
            .unwrap_or_else(|| panic!("no {event} error with '{needle}' in {errors:#?}"))
    };
    let raised = find("after_model", "ValueError: after_model is broken");
    assert_eq!(raised["plugin"], "probe");
    assert_eq!(raised["dialect"], "felix");
    assert_eq!(raised["handler"], "felix_probe.raising_after_model");
    find(
        "after_model",
        "returned a 'user' message, not an assistant's; the reply is kept",
    );
    assert_eq!(
        find("before_tool", "without a 'block' key")["error"],
        "answered {'deny': True} without a 'block' key; treated as allow"
    );
    assert_eq!(
        find("before_tool", "timed out")["error"],
        "timed out after 0.5 s and was skipped"
    );
}

#[test]
fn filter_history_shapes_the_turn_and_terminate_ends_it() {
    let env = env_with_plugin();
    env.turn("turns:\n  - say: \"noted\"\n", "h", "please forget this");
    let report = env.turn("turns:\n  - say: \"second\"\n", "h", "next");
    let seen = messages_of(&report["model_calls"][0]);
    assert!(!seen.iter().any(|m| m.contains("forget")), "{seen:#?}");
    assert!(seen.iter().any(|m| m == "next"));
    // The transcript keeps what filter_history hid.
    let transcript = std::fs::read_to_string(env.home.path().join("sessions/h.jsonl")).unwrap();
    assert!(transcript.contains("please forget this"));

    let stop = env.turn(
        "turns:\n  - say: \"Stopping now.\"\n    tool_calls:\n      - name: felix_echo\n        args: {text: stop}\n  - say: never\n",
        "term",
        "go",
    );
    assert_eq!(stop["ended_by"], "tool_terminate");
    assert_eq!(stop["reply"], "Stopping now.");
    assert_eq!(stop["model_calls"].as_array().unwrap().len(), 1);
    assert_eq!(stop["tool_calls"][0]["result"], "[error/blocked] stop here");
}

#[test]
fn listing_startup_hooks_compaction_and_load_failures() {
    let env = Env::new(&[
        "probe",
        "starter",
        "late",
        "notcallable",
        "importfail",
        "asyncreg",
    ]);
    felix_tree(
        &env.plugins(),
        "felix-probe",
        &[("probe", "felix_probe:register")],
        "felix_probe",
        PLUGIN,
    );
    let mark = env.home.path().join("started.txt");
    felix_tree(
        &env.plugins(),
        "starter-dir",
        &[("starter", "starter_pkg:register")],
        "starter_pkg",
        &format!(
            r#"
import asyncio
def register(registry):
    async def on_start(app):
        await asyncio.sleep(0)
        open({mark:?}, "a").write(f"started {{'starter' in app.state.plugins}} {{'felix_echo' in app.state.tools}}\n")
    registry.register_startup_hook(on_start)
    def summarize(prep, ctx):
        if any("keep everything" in (m.content or "") for m in prep["messages"] + prep["kept"]):
            return {{"cancel": True}}
        return {{"summary": f"{{len(prep['messages'])}} dropped for {{ctx['thread_id']}}"}}
    registry.register_before_compact(summarize)
"#,
            mark = mark.to_string_lossy()
        ),
    );
    felix_tree(
        &env.plugins(),
        "late-dir",
        &[("late", "late_pkg:register")],
        "late_pkg",
        "SAVED = []\ndef register(registry):\n    SAVED.append(registry)\n    registry.register_before_turn(lambda m, c: None)\n    registry.register_before_turn(lambda m, c: SAVED[0].register_after_tool(lambda *a: None))\n",
    );
    felix_tree(
        &env.plugins(),
        "nc",
        &[("notcallable", "nc_pkg:VALUE")],
        "nc_pkg",
        "VALUE = 3\n",
    );
    felix_tree(
        &env.plugins(),
        "if",
        &[("importfail", "if_pkg:register")],
        "if_pkg",
        "import not_installed_anywhere\n",
    );
    felix_tree(
        &env.plugins(),
        "ar",
        &[("asyncreg", "ar_pkg:register")],
        "ar_pkg",
        "async def register(registry):\n    pass\n",
    );
    felix_tree(
        &env.plugins(),
        "dormant-dir",
        &[("dormant", "d_pkg:register")],
        "d_pkg",
        "def register(registry):\n    pass\n",
    );

    let list = env.list();
    let rec = |key: &str| {
        list.iter()
            .find(|p| p["key"] == key)
            .unwrap_or_else(|| panic!("no {key} in {list:#?}"))
            .clone()
    };
    let probe = rec("probe");
    assert_eq!(probe["dialect"], "felix");
    assert_eq!(probe["entry"], "felix_probe:register");
    assert_eq!(probe["dependencies"], serde_json::json!([]));
    assert_eq!(probe["source"], "user");
    assert_eq!(probe["version"], "1.2.3");
    assert_eq!(probe["status"], "loaded");
    assert!(probe["path"].as_str().unwrap().ends_with("felix-probe"));
    let tools: Vec<&str> = probe["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "felix_echo",
            "felix_fail",
            "felix_touch",
            "felix_soft_error"
        ]
    );
    assert!(probe["hooks"]
        .as_array()
        .unwrap()
        .contains(&Value::from("before_tool")));
    assert!(
        rec("notcallable")["error"]
            .as_str()
            .unwrap()
            .contains("is a int, not a callable"),
        "{:#}",
        rec("notcallable")
    );
    assert_eq!(
        rec("importfail")["error"],
        "ModuleNotFoundError: No module named 'not_installed_anywhere'"
    );
    assert!(rec("asyncreg")["error"]
        .as_str()
        .unwrap()
        .contains("returned an awaitable"));
    assert_eq!(rec("dormant")["status"], "not-enabled");
    // plugins list does not run startup hooks.
    assert!(!mark.exists());

    // A registration after register() returned raises, naming the plugin (and fails open).
    let late = env.turn("turns:\n  - say: ok\n", "late", "hi");
    let late_error = late["hook_errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["plugin"] == "late")
        .unwrap_or_else(|| panic!("{late:#}"));
    assert!(
        late_error["error"].as_str().unwrap().starts_with(
            "RuntimeError: Felix plugin 'late' called registry.register_after_tool after its register(registry) returned"
        ),
        "{late_error:#}"
    );
    assert_eq!(
        std::fs::read_to_string(&mark).unwrap(),
        "started True True\n"
    );

    // /compact: a summary replaces what is dropped; a cancel leaves the transcript alone.
    for i in 0..6 {
        env.turn("turns:\n  - say: ok\n", "c", &format!("message {i}"));
    }
    let compact = env.turn("turns:\n  - say: unused\n", "c", "/compact");
    assert!(
        compact["reply"]
            .as_str()
            .unwrap()
            .starts_with("Compacted the session"),
        "{compact:#}"
    );
    let transcript = std::fs::read_to_string(env.home.path().join("sessions/c.jsonl")).unwrap();
    let first: Value = serde_json::from_str(transcript.lines().next().unwrap()).unwrap();
    assert_eq!(first["role"], "user");
    assert!(
        first["content"]
            .as_str()
            .unwrap()
            .ends_with("dropped for c"),
        "{first}"
    );
    env.turn("turns:\n  - say: ok\n", "k", "keep everything");
    for i in 0..5 {
        env.turn("turns:\n  - say: ok\n", "k", &format!("more {i}"));
    }
    let before = std::fs::read_to_string(env.home.path().join("sessions/k.jsonl")).unwrap();
    let cancelled = env.turn("turns:\n  - say: unused\n", "k", "/compact");
    assert_eq!(cancelled["reply"], "Compaction cancelled by a plugin.");
    assert_eq!(
        std::fs::read_to_string(env.home.path().join("sessions/k.jsonl")).unwrap(),
        before
    );
}

/// An installed distribution: its package and `*.dist-info` (METADATA,
/// entry_points.txt, RECORD) in a site directory, as pip lays them out.
/// Written by hand: this machine's setuptools cannot build a wheel offline
/// (no `wheel` package), so `pip install` of a source tree is not possible.
fn install_distribution(site: &Path) {
    let package = site.join("felix_installed");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(
        package.join("__init__.py"),
        r#"
from felix.tools.types import define_tool
class P:
    def register_tools(self, register):
        register("installed_hello", lambda: define_tool(name="installed_hello", description="Hi", handler=lambda a: "hello from site-packages"))
def register(registry):
    registry.register_plugin(P())
"#,
    )
    .unwrap();
    let meta = site.join("felix_installed-1.2.3.dist-info");
    std::fs::create_dir_all(&meta).unwrap();
    std::fs::write(
        meta.join("METADATA"),
        "Metadata-Version: 2.1\nName: felix-installed\nVersion: 1.2.3\nSummary: An installed Felix plugin\n\nLong text.\n",
    )
    .unwrap();
    std::fs::write(
        meta.join("entry_points.txt"),
        "[console_scripts]\nfelix-installed = felix_installed.cli:main\n\n[felix.plugins]\ninstalled = felix_installed:register\nbroken-ep = felix_installed.missing:register\n",
    )
    .unwrap();
    std::fs::write(meta.join("RECORD"), "felix_installed/__init__.py,,\n").unwrap();
}

#[test]
fn an_installed_distribution_is_found_by_its_entry_point() {
    let env = Env::new(&[]);
    let site = tempfile::tempdir().unwrap();
    install_distribution(site.path());
    let env = Env {
        pythonpath: Some(site.path().to_path_buf()),
        ..env
    };
    let list = env.list();
    let installed = list
        .iter()
        .find(|p| p["key"] == "installed")
        .unwrap_or_else(|| panic!("{list:#?}"));
    assert_eq!(installed["source"], "entrypoint");
    assert_eq!(installed["status"], "loaded");
    assert_eq!(installed["version"], "1.2.3");
    assert_eq!(installed["description"], "An installed Felix plugin");
    assert_eq!(installed["entry"], "felix_installed:register");
    assert_eq!(installed["tools"], serde_json::json!(["installed_hello"]));
    assert_eq!(installed["path"], site.path().to_str().unwrap());
    let broken = list.iter().find(|p| p["key"] == "broken-ep").unwrap();
    assert_eq!(
        broken["error"],
        "ModuleNotFoundError: No module named 'felix_installed.missing'"
    );
    let out = env.run(&["tools", "call", "installed_hello"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from site-packages\n"
    );
    // plugins.disabled keeps an installed entry point out.
    std::fs::write(
        env.home.path().join("config.json"),
        r#"{"plugins": {"enabled": [], "disabled": ["installed"]}}"#,
    )
    .unwrap();
    let list = env.list();
    let installed = list.iter().find(|p| p["key"] == "installed").unwrap();
    assert_eq!(installed["status"], "disabled");
}

#[test]
fn plugins_install_accepts_a_felix_source_tree() {
    let env = Env::new(&[]);
    let src = tempfile::tempdir().unwrap();
    let tree = felix_tree(
        src.path(),
        "my-felix-plugin",
        &[("mine", "mine_pkg:register")],
        "mine_pkg",
        "def register(registry):\n    pass\n",
    );
    let out = env.run(&["plugins", "install", tree.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Installed under its key, not its directory name; listed, not yet enabled.
    assert!(env.plugins().join("mine/pyproject.toml").is_file());
    let list = env.list();
    let mine = list.iter().find(|p| p["key"] == "mine").unwrap();
    assert_eq!(mine["dialect"], "felix");
    assert_eq!(mine["status"], "not-enabled");
    assert!(mine["path"].as_str().unwrap().ends_with("plugins/mine"));

    let other = src.path().join("not-felix");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("pyproject.toml"), "[project]\nname = \"x\"\n").unwrap();
    let refused = env.run(&["plugins", "install", other.to_str().unwrap()]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("declares no [project.entry-points.\"felix.plugins\"]"),
        "{err}"
    );
}

const FATAL_PLUGIN: &str = r#"
from felix.tools.types import define_tool
from felix.tools.errors import tool_error_output

class Plugin:
    def register_tools(self, register):
        def explode(a):
            raise RuntimeError("the disk is gone")
        register("felix_fatal", lambda: define_tool(
            name="felix_fatal", description="Fails fatally", handler=explode, fatal=True))
        register("felix_fatal_soft", lambda: define_tool(
            name="felix_fatal_soft", description="Returns an error", fatal=True,
            handler=lambda a: tool_error_output("not_found", "[error/not_found] nothing there")))
        register("felix_plain_fail", lambda: define_tool(
            name="felix_plain_fail", description="Fails", handler=explode))
        register("felix_where", lambda: define_tool(
            name="felix_where", description="Where am I",
            handler=lambda a, ctx: f"manifest={ctx.manifest_id}"))

def register(registry):
    registry.register_plugin(Plugin())
"#;

fn env_with_fatal_plugin() -> Env {
    let env = Env::new(&["fatal"]);
    felix_tree(
        &env.plugins(),
        "felix-fatal",
        &[("fatal", "felix_fatal:register")],
        "felix_fatal",
        FATAL_PLUGIN,
    );
    env
}

#[test]
fn a_fatal_tool_failure_ends_the_turn_after_its_batch() {
    let env = env_with_fatal_plugin();
    let report = env.turn(
        "turns:\n  - say: \"Trying both.\"\n    tool_calls:\n      - name: felix_fatal\n        args: {}\n      - name: felix_where\n        args: {}\n  - say: never\n",
        "fatal",
        "go",
    );
    assert_eq!(report["ended_by"], "tool_terminate", "{report:#}");
    assert_eq!(report["reply"], "Trying both.");
    assert_eq!(report["model_calls"].as_array().unwrap().len(), 1);
    let result = report["tool_calls"][0]["result"].as_str().unwrap();
    assert!(
        result.starts_with("[fatal/internal] the disk is gone"),
        "{result}"
    );
    assert_eq!(report["tool_calls"][1]["result"], "manifest=main");

    // Neither a returned error of a fatal tool nor a non-fatal tool raising ends it.
    for tool in ["felix_fatal_soft", "felix_plain_fail"] {
        let report = env.turn(
            &format!("turns:\n  - say: \"Trying.\"\n    tool_calls:\n      - name: {tool}\n        args: {{}}\n  - say: carried on\n"),
            tool,
            "go",
        );
        assert_eq!(report["ended_by"], "answer", "{tool}: {report:#}");
        assert_eq!(report["reply"], "carried on");
        assert!(report["tool_calls"][0]["result"]
            .as_str()
            .unwrap()
            .starts_with("[error/"));
    }
}

#[test]
fn a_tool_inside_a_delegate_sub_agent_sees_manifest_id_delegate() {
    let env = env_with_fatal_plugin();
    // The sub-agent replays the script from the top: its `delegate` call is
    // refused (not in its tools), its `felix_where` runs as the delegate.
    let report = env.turn(
        "turns:\n  - tool_calls:\n      - name: delegate\n        args: {task: \"where\", tools: [\"felix_where\"]}\n      - name: felix_where\n        args: {}\n  - say: \"results: {tool_results}\"\n",
        "deleg",
        "go",
    );
    let calls = report["tool_calls"].as_array().unwrap();
    let delegate = calls.iter().find(|c| c["name"] == "delegate").unwrap();
    let main = calls.iter().find(|c| c["name"] == "felix_where").unwrap();
    assert_eq!(main["result"], "manifest=main", "{report:#}");
    let sub = delegate["result"].as_str().unwrap();
    assert!(sub.contains("manifest=delegate"), "{sub}");
    assert!(!sub.contains("manifest=main"), "{sub}");
}

#[test]
fn doctor_names_where_the_felix_modules_come_from() {
    if crate::common::in_process_only(
        "doctor_names_where_the_felix_modules_come_from",
        "an isolated Felix plugin's felix modules are imported in its worker; plughost's own process imports none, which is what doctor's python section reports",
    ) {
        return;
    }
    let env = env_with_fatal_plugin();
    let out = env.run(&["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let felix = report["python"]["felix"].as_str().unwrap();
    assert!(felix.starts_with("compat"), "{report:#}");
    let text = env.run(&["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("felix modules: compat (plughost's own felix, felix_ai)"),
        "{text}"
    );
}

#[test]
fn doctor_lists_every_felix_hook_with_its_counts() {
    let env = env_with_plugin();
    let out = env.run(&["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let diag = report["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "probe")
        .unwrap()
        .clone();
    // Every callback, by Felix's own kind, each its own row; a doctor
    // process has run no turn.
    let mut rows: Vec<(String, String)> = diag["hook_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            for counter in ["calls", "errors", "wrong_shape", "timeouts"] {
                assert_eq!(r[counter], 0, "{r}");
            }
            (
                r["event"].as_str().unwrap().to_string(),
                r["callback"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    rows.sort();
    let expected: Vec<(String, String)> = [
        ("after_model", "drop_dropped"),
        ("after_model", "raising_after_model"),
        ("after_model", "wrong_after_model"),
        ("after_tool", "later_wins"),
        ("after_tool", "redact"),
        ("before_model", "before_model"),
        ("before_tool", "guard"),
        ("before_tool", "second_guard"),
        ("before_turn", "before_turn"),
        ("filter_history", "filter_history"),
    ]
    .iter()
    .map(|(e, c)| (e.to_string(), format!("felix_probe.{c}")))
    .collect();
    assert_eq!(rows, expected, "{diag:#}");
    assert_eq!(diag["silent_hooks"], serde_json::json!([]), "{diag:#}");
    assert_eq!(report["codumentor_load_order"], serde_json::json!([]));

    let text = env.run(&["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("    hook calls: "))
        .unwrap_or_else(|| panic!("{text}"));
    // One entry per kind, its callbacks summed.
    assert_eq!(line.matches("after_model 0").count(), 1, "{line}");
    assert!(line.contains("before_tool 0"), "{line}");
    assert!(!text.contains("codumentor load order"), "{text}");
}

#[test]
fn an_installed_distribution_in_the_active_virtualenv_is_found() {
    // `VIRTUAL_ENV` names a virtualenv the embedded interpreter did not
    // start in: its site-packages counts for entry-point discovery, as it
    // does for imports.
    let env = Env::new(&[]);
    let venv = tempfile::tempdir().unwrap();
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(venv.path())
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let lib = venv.path().join("lib");
    let site = std::fs::read_dir(&lib)
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no site-packages under {}", lib.display()));
    install_distribution(&site);
    let listed = |venv: Option<&Path>| -> Vec<Value> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(["plugins", "list", "--json"])
            .env("PLUGHOST_HOME", env.home.path())
            .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
            .env_remove("PYTHONPATH")
            .env_remove("PLUGHOST_LOG");
        match venv {
            Some(v) => cmd.env("VIRTUAL_ENV", v),
            None => cmd.env_remove("VIRTUAL_ENV"),
        };
        let out = cmd.output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        })
    };
    let list = listed(Some(venv.path()));
    let installed = list
        .iter()
        .find(|p| p["key"] == "installed")
        .unwrap_or_else(|| panic!("{list:#?}"));
    assert_eq!(installed["source"], "entrypoint");
    assert_eq!(installed["status"], "loaded", "{installed:#}");
    assert_eq!(installed["path"], site.to_str().unwrap());
    let list = listed(None);
    assert!(list.iter().all(|p| p["key"] != "installed"), "{list:#?}");
}
