//! Hermes context engines (issue 22, item 3): an engine written in
//! Hermes's shape (`agent.context_engine.ContextEngine`), registered by a
//! plugin with `ctx.register_context_engine` and selected by
//! `context.engine`, replaces plughost's `/compact` in `plughost chat` with
//! the scripted model: its `compress` list becomes the transcript the next
//! turn is built from; it hears the session start, every model call's usage
//! and the session end; its tool runs through the pipeline. An engine whose
//! `compress` raises leaves `/compact` to plughost's own compaction, and
//! the chat goes on. `plugins doctor` says whether the engine is active.
use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

const ENGINE: &str = r#"
import json, os
from agent.context_engine import ContextEngine

def _log(event, **fields):
    with open(os.environ["CE_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")

class Squash(ContextEngine):
    @property
    def name(self):
        return "squash"

    def update_from_response(self, usage):
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)
        _log("usage", keys=sorted(usage))

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False):
        _log("compress", count=len(messages), roles=[m["role"] for m in messages],
             force=force, current_tokens=current_tokens)
        if os.environ.get("CE_BROKEN"):
            raise RuntimeError("summariser down")
        summary = {"role": "user", "content": "[squashed %d messages]" % (len(messages) - 2)}
        return [summary] + messages[-2:]

    def on_session_start(self, session_id, **kwargs):
        _log("on_session_start", session_id=session_id, platform=kwargs.get("platform"),
             has_home=bool(kwargs.get("hermes_home")))

    def on_session_end(self, session_id, messages):
        _log("on_session_end", session_id=session_id, count=len(messages))

    def get_tool_schemas(self):
        return [{"name": "squash_status", "description": "How much was squashed",
                 "parameters": {"type": "object", "properties": {"verbose": {"type": "boolean"}}}}]

    def handle_tool_call(self, name, args, **kwargs):
        _log("tool", name=name, args=args)
        return json.dumps({"engine": self.name, "verbose": args.get("verbose", False)})

def register(ctx):
    ctx.register_context_engine(Squash())
"#;

struct Env {
    plughost_home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    /// The engine's plugin enabled; `context.engine` set to `engine` when given.
    fn new(engine: Option<&str>) -> Env {
        let env = Env {
            plughost_home: tempfile::tempdir().unwrap(),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        let mut config = "plugins:\n  enabled: [squash]\n".to_string();
        if let Some(engine) = engine {
            config.push_str(&format!("context:\n  engine: {engine}\n"));
        }
        std::fs::write(env.hermes_home.path().join("config.yaml"), config).unwrap();
        let plugins = env.hermes_home.path().join("plugins");
        let manifest = "name: squash\nversion: 0.1.0\n";
        write_plugin(&plugins, "squash", manifest, &[("__init__.py", ENGINE)]);
        env
    }

    fn log(&self) -> PathBuf {
        self.plughost_home.path().join("ce.log")
    }

    fn command(&self, broken: bool) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.env("PLUGHOST_HOME", self.plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env("CE_LOG", self.log())
            .env_remove("PLUGHOST_LOG")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE");
        if broken {
            cmd.env("CE_BROKEN", "1");
        }
        cmd
    }

    /// `plughost chat` over `lines`, with the scripted model answering
    /// `a1`, `a2`, … in turn.
    fn chat(&self, lines: &[&str], broken: bool) -> Output {
        let script = self.plughost_home.path().join("chat.yaml");
        let turns: String = (1..=lines.len())
            .map(|i| format!("  - say: a{i}\n"))
            .collect();
        std::fs::write(&script, format!("turns:\n{turns}")).unwrap();
        let mut child = self
            .command(broken)
            .args(["chat", "--session", "c", "--model", "scripted", "--script"])
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn transcript(&self) -> Vec<Value> {
        read_lines(&self.plughost_home.path().join("sessions/c.jsonl"))
    }

    fn events(&self) -> Vec<Value> {
        read_lines(&self.log())
    }
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const FIVE_THEN_COMPACT: [&str; 7] = ["one", "two", "three", "four", "five", "/compact", "six"];

#[test]
fn the_selected_engine_replaces_compact_and_hears_the_session() {
    let env = Env::new(Some("squash"));
    let out = env.chat(&FIVE_THEN_COMPACT, false);
    let text = said(&out);
    assert!(
        text.contains("Compacted the session with the context engine: 10 message(s) became 3."),
        "{text}"
    );
    // The engine's list is the transcript the next turn was built on.
    let stored = env.transcript();
    let contents: Vec<&str> = stored
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        contents,
        ["[squashed 8 messages]", "five", "a5", "six", "a6"],
        "{stored:#?}"
    );
    let events = env.events();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"on_session_start"), "{names:?}");
    assert_eq!(names.last(), Some(&"on_session_end"), "{names:?}");
    assert_eq!(events[0]["platform"], "cli");
    assert_eq!(events[0]["has_home"], true);
    assert_eq!(
        names.iter().filter(|n| **n == "usage").count(),
        6,
        "{names:?}"
    );
    let usage = events.iter().find(|e| e["event"] == "usage").unwrap();
    for key in ["completion_tokens", "prompt_tokens", "total_tokens"] {
        assert!(
            usage["keys"].as_array().unwrap().contains(&key.into()),
            "{usage}"
        );
    }
    let compress = events.iter().find(|e| e["event"] == "compress").unwrap();
    assert_eq!(compress["count"], 10, "{compress}");
    assert_eq!(
        compress["force"], true,
        "manual /compact is Hermes's forced /compress"
    );
    assert!(!compress["roles"]
        .as_array()
        .unwrap()
        .contains(&"system".into()));
    let end = events.last().unwrap();
    assert_eq!(end["session_id"], "c");
    assert_eq!(
        end["count"], 5,
        "the conversation as of the last turn: {end}"
    );
}

#[test]
fn an_engine_that_raises_leaves_compact_to_plughost_and_the_chat_goes_on() {
    let env = Env::new(Some("squash"));
    let out = env.chat(&FIVE_THEN_COMPACT, true);
    let text = said(&out);
    assert!(
        text.contains("context engine 'squash' (plugin 'squash') compress() raised"),
        "{text}"
    );
    assert!(text.contains("summariser down"), "{text}");
    assert!(
        text.contains("Compacted the session: dropped 2 older message(s), kept 8."),
        "{text}"
    );
    assert!(text.contains("a6"), "the next turn answered: {text}");
    let stored = env.transcript();
    assert_eq!(stored.len(), 10, "{stored:#?}");
    assert_eq!(stored[0]["content"], "two");
}

#[test]
fn the_engines_tool_runs_through_the_pipeline() {
    let env = Env::new(Some("squash"));
    let script = env.plughost_home.path().join("tool.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: squash_status\n        args: {verbose: true}\n  - say: \"{tool_results}\"\n",
    )
    .unwrap();
    let mut cmd = env.command(false);
    cmd.args([
        "run",
        "how squashed",
        "--json",
        "--model",
        "scripted",
        "--script",
    ])
    .arg(&script);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", said(&out));
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        turn["reply"], r#"{"engine": "squash", "verbose": true}"#,
        "{turn:#}"
    );
    let events = env.events();
    let tool = events.iter().find(|e| e["event"] == "tool").unwrap();
    assert_eq!(tool["name"], "squash_status");
}

#[test]
fn doctor_says_whether_the_engine_is_active() {
    let active = Env::new(Some("squash"));
    let mut cmd = active.command(false);
    cmd.args(["plugins", "doctor"]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    let text = said(&out);
    assert!(
        text.contains("context_engine provider 'squash': active (context.engine; replaces plughost's /compact)"),
        "{text}"
    );

    let unset = Env::new(None);
    let mut cmd = unset.command(false);
    cmd.args(["plugins", "doctor"]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    let text = said(&out);
    assert!(
        text.contains(
            "context_engine provider 'squash': not active: context.engine is 'compressor'"
        ),
        "{text}"
    );
    // Not selected, plughost's own /compact stays.
    let out = unset.chat(&FIVE_THEN_COMPACT, false);
    let text = said(&out);
    assert!(
        text.contains("Compacted the session: dropped 2 older message(s), kept 8."),
        "{text}"
    );
    assert!(!unset.events().iter().any(|e| e["event"] == "compress"));
}

/// Through `plughost serve`: a `/v1/chat/completions` request's
/// conversation starts the engine's session, reports the model call's
/// usage and ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_hears_a_serve_conversation() {
    let env = Env::new(Some("squash"));
    let script = env.plughost_home.path().join("serve.yaml");
    std::fs::write(&script, "turns:\n  - say: served\n").unwrap();
    let child = env
        .command(false)
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = common::chat_once(child, "hello there").await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["choices"][0]["message"]["content"], "served");
    let events = env.events();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["on_session_start", "usage", "on_session_end"],
        "{events:#?}"
    );
    assert_eq!(events[2]["count"], 2, "{events:#?}");
}
