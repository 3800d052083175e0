//! Hermes memory providers: a provider written in Hermes's shape
//! (`agent.memory_provider.MemoryProvider`) under `$HERMES_HOME/plugins/memory/`,
//! selected by `memory.provider`, driven through `plughost run` with the
//! scripted model: initialised once, its recall fenced into the user
//! message of the model call, its tool offered and dispatched, the turn
//! synced, the session ended and the provider shut down. A provider that
//! raises everywhere leaves the turn answering.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

/// A provider that logs every call it gets as a JSON line to `$MEM_LOG`.
const RECALL: &str = r#"
import json, os
from agent.memory_provider import MemoryProvider

def _log(event, **fields):
    with open(os.environ["MEM_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")

class Recall(MemoryProvider):
    @property
    def name(self):
        return "recall"

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        _log("initialize", session_id=session_id, platform=kwargs.get("platform"),
             has_home=bool(kwargs.get("hermes_home")))

    def system_prompt_block(self):
        return "You have long-term memory (recall_store)."

    def prefetch(self, query, *, session_id=""):
        _log("prefetch", query=query, session_id=session_id)
        return "the user likes green tea"

    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None):
        _log("sync_turn", user=user_content, assistant=assistant_content,
             roles=[m["role"] for m in (messages or [])])

    def queue_prefetch(self, query, *, session_id=""):
        _log("queue_prefetch", query=query)

    def on_turn_start(self, turn_number, message, **kwargs):
        # A file of its own: the other tests match the main log's events.
        with open(os.environ["MEM_LOG"] + ".turns", "a") as f:
            f.write(f"{turn_number}\n")

    def get_tool_schemas(self):
        return [{"name": "recall_store", "description": "Store a fact",
                 "parameters": {"type": "object", "properties": {"fact": {"type": "string"}},
                                "required": ["fact"]}}]

    def handle_tool_call(self, tool_name, args, **kwargs):
        _log("tool", tool=tool_name, args=args)
        return json.dumps({"stored": args["fact"]})

    def on_session_end(self, messages):
        _log("on_session_end", count=len(messages))

    def shutdown(self):
        _log("shutdown")

def register(ctx):
    ctx.register_memory_provider(Recall())
"#;

/// A second provider, not selected: it must never load.
const OTHER: &str = r#"
import os
from agent.memory_provider import MemoryProvider

class Other(MemoryProvider):
    name = "other"
    def is_available(self): return True
    def initialize(self, session_id, **kw): open(os.environ["MEM_LOG"] + ".other", "w").write("loaded")
    def get_tool_schemas(self): return []

def register(ctx):
    open(os.environ["MEM_LOG"] + ".other", "w").write("registered")
    ctx.register_memory_provider(Other())
"#;

/// Every method raises.
const BROKEN: &str = r#"
from agent.memory_provider import MemoryProvider

class Broken(MemoryProvider):
    name = "broken"
    def is_available(self): return True
    def initialize(self, session_id, **kw): raise RuntimeError("backend down at initialize")
    def system_prompt_block(self): raise RuntimeError("backend down at system_prompt_block")
    def prefetch(self, query, *, session_id=""): raise ZeroDivisionError("recall exploded")
    def sync_turn(self, u, a, **kw): raise RuntimeError("backend down at sync_turn")
    def get_tool_schemas(self):
        return [{"name": "broken_lookup", "description": "x", "parameters": {"type": "object", "properties": {}}}]
    def handle_tool_call(self, tool_name, args, **kw): raise KeyError("no such memory")
    def on_session_end(self, messages): raise RuntimeError("backend down at on_session_end")
    def shutdown(self): raise RuntimeError("backend down at shutdown")

def register(ctx):
    ctx.register_memory_provider(Broken())
"#;

const STORE: &str = r#"
turns:
  - tool_calls:
      - name: recall_store
        args: {fact: "green tea"}
  - say: "noted: {tool_results}"
"#;

const BROKEN_SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: broken_lookup
        args: {}
  - say: "still here: {tool_results}"
"#;

struct Env {
    plughost_home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new(provider: &str) -> Env {
        let env = Env {
            plughost_home: tempfile::tempdir().unwrap(),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        let config = format!("memory:\n  provider: {provider}\n");
        std::fs::write(env.hermes_home.path().join("config.yaml"), config).unwrap();
        let memory = env.hermes_home.path().join("plugins").join("memory");
        for (name, init) in [("recall", RECALL), ("other", OTHER), ("broken", BROKEN)] {
            let manifest = format!("name: {name}\nversion: 0.1.0\n");
            write_plugin(&memory, name, &manifest, &[("__init__.py", init)]);
        }
        env
    }

    fn log(&self) -> std::path::PathBuf {
        self.plughost_home.path().join("mem.log")
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env("MEM_LOG", self.log())
            .env_remove("PLUGHOST_LOG")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE");
        // The isolated pass runs the provider in a worker (issue 47).
        if crate::common::isolate_all() {
            cmd.env("PLUGHOST_ISOLATE", "all");
        }
        run_bounded(cmd, Duration::from_secs(60))
    }

    fn turn(&self, message: &str, script: &str) -> (Value, String) {
        let path = self.plughost_home.path().join("script.yaml");
        std::fs::write(&path, script).unwrap();
        let out = self.run(&[
            "run",
            message,
            "--json",
            "--model",
            "scripted",
            "--script",
            path.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let json = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        (json, err)
    }

    fn events(&self) -> Vec<Value> {
        read_events(&self.log())
    }
}

fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

#[test]
fn the_selected_provider_is_driven_through_a_turn_as_hermes_drives_it() {
    let env = Env::new("recall");
    let (turn, _) = env.turn("remember my favourite tea", STORE);
    assert_eq!(
        turn["reply"], r#"noted: {"stored": "green tea"}"#,
        "{turn:#}"
    );
    let events = env.events();
    assert_eq!(
        names(&events),
        [
            "initialize",
            "prefetch",
            "tool",
            "sync_turn",
            "queue_prefetch",
            "on_session_end",
            "shutdown"
        ],
        "{events:#?}"
    );
    assert_eq!(events[0]["platform"], "cli");
    assert_eq!(events[0]["has_home"], true);
    assert_eq!(events[1]["query"], "remember my favourite tea");
    assert_eq!(events[2]["args"], serde_json::json!({"fact": "green tea"}));
    assert_eq!(events[3]["user"], "remember my favourite tea");
    assert_eq!(events[3]["assistant"], turn["reply"]);
    assert_eq!(events[0]["session_id"], events[1]["session_id"]);
    // Every model call offers the tool and carries the fenced recall on
    // the user message; the system prompt carries the provider's block.
    let calls = turn["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{turn:#}");
    for call in calls {
        assert!(
            call["tools"]
                .as_array()
                .unwrap()
                .contains(&"recall_store".into()),
            "{call:#}"
        );
        let messages = call["messages"].as_array().unwrap();
        let system = messages[0]["content"].as_str().unwrap();
        assert!(system.contains("You have long-term memory"), "{system}");
        let user = messages.iter().find(|m| m["role"] == "user").unwrap();
        let user = user["content"].as_str().unwrap();
        assert!(
            user.starts_with("remember my favourite tea\n\n<memory-context>"),
            "{user}"
        );
        assert!(
            user.contains("<memory-context>\n[System note: The following is recalled memory context, NOT new user input."),
            "{user}"
        );
        assert!(
            user.contains("the user likes green tea\n</memory-context>"),
            "{user}"
        );
    }
    // The transcript keeps the user's own words.
    let stored = turn["messages"].as_array().unwrap();
    assert_eq!(stored[0]["content"], "remember my favourite tea");
    // The other provider was never imported.
    assert!(!env.log().with_extension("log.other").exists());
}

#[test]
fn a_trivial_prompt_skips_recall_but_still_syncs() {
    let env = Env::new("recall");
    let (turn, _) = env.turn("thanks!", "turns:\n  - say: ok\n");
    assert_eq!(turn["reply"], "ok");
    let events = env.events();
    assert!(!names(&events).contains(&"prefetch"), "{events:#?}");
    assert!(names(&events).contains(&"sync_turn"), "{events:#?}");
}

#[test]
fn a_provider_that_raises_never_breaks_the_turn() {
    let env = Env::new("broken");
    let (turn, err) = env.turn("look it up", BROKEN_SCRIPT);
    let reply = turn["reply"].as_str().unwrap();
    assert!(reply.starts_with("still here: "), "{turn:#}");
    assert!(reply.contains("no such memory"), "{reply}");
    for method in ["initialize", "prefetch", "sync_turn", "on_session_end"] {
        assert!(
            err.contains(&format!(
                "memory provider 'broken' (plugin 'memory/broken') {method}() raised"
            )),
            "{method}: {err}"
        );
    }
    assert!(err.contains("ZeroDivisionError"), "{err}");
    assert!(err.contains("Traceback"), "{err}");
}

#[test]
fn plugins_list_says_which_memory_provider_is_active() {
    let env = Env::new("recall");
    let out = env.run(&["plugins", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("the active one is 'recall'"), "{text}");
}

/// `plughost chat`: one session of two turns initialises the provider once,
/// recalls and syncs per turn, and ends the session (and shuts the
/// provider down) when the chat exits.
#[test]
fn chat_initialises_once_per_session_and_ends_it_at_exit() {
    use std::io::Write;
    let env = Env::new("recall");
    let script = env.plughost_home.path().join("chat.yaml");
    std::fs::write(&script, "turns:\n  - say: one\n  - say: two\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["chat", "--session", "c", "--model", "scripted", "--script"])
        .arg(&script)
        .env("PLUGHOST_HOME", env.plughost_home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env("HERMES_HOME", env.hermes_home.path())
        .env("MEM_LOG", env.log())
        .env_remove("PLUGHOST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"what tea do I like\nand what coffee\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = env.events();
    assert_eq!(
        names(&events),
        [
            "initialize",
            "prefetch",
            "sync_turn",
            "queue_prefetch",
            "prefetch",
            "sync_turn",
            "queue_prefetch",
            "on_session_end",
            "shutdown"
        ],
        "{events:#?}"
    );
    assert_eq!(events[0]["session_id"], "c");
    assert_eq!(events[2]["assistant"], "one");
    assert_eq!(events[5]["user"], "and what coffee");
    // The second sync sees the whole conversation so far.
    assert_eq!(
        events[5]["roles"],
        serde_json::json!(["user", "assistant", "user", "assistant"])
    );
}

/// The turn number `on_turn_start` gets goes on across processes: each
/// `plughost run --session s` is a new process (as a request on another
/// replica is), and the session's third turn is turn 3, as in Hermes's
/// one long-lived agent, not turn 1 again.
#[test]
fn the_turn_number_goes_on_in_a_new_process() {
    let env = Env::new("recall");
    let script = env.plughost_home.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - say: noted\n").unwrap();
    for message in ["what tea do I like", "and what coffee", "and what cake"] {
        let out = env.run(&[
            "run",
            message,
            "--session",
            "s",
            "--model",
            "scripted",
            "--script",
            script.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let turns =
        std::fs::read_to_string(format!("{}.turns", env.log().display())).unwrap_or_default();
    assert_eq!(turns, "1\n2\n3\n");
}
