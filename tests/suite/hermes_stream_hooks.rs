//! Hermes's stream observers (`on_stream_start`, `on_stream_delta`,
//! `on_stream_end`, `on_interim_message`; issue 52 item 2), in the shape of
//! the public plugins that use them (an SSE side-channel and a chat "card"
//! that shows a turn's progress: keyword-only callbacks taking `**_`,
//! keyed by `turn_id`), on disk, through agent turns with the scripted
//! model and the built-in tools: what each hook hears, in which order,
//! and that a failing observer or a failing model call never breaks the
//! turn.

use std::path::Path;
use std::sync::Arc;

use plughost::agent::provider::{ChatRequest, ChatResponse, Provider, ProviderError, StreamEvent};
use plughost::core::hooks::BoxFuture;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use crate::claude_hooks::Fixture;

/// Records every stream event, as a progress card does.
const CARD: &str = r#"
import json, os

LOG = os.path.join(os.path.dirname(__file__), "events.jsonl")

def _log(hook, **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps({"hook": hook, **kw}) + "\n")

def on_start(*, turn_id="", iteration=0, session_id=None, surface=None, **kw):
    _log("on_stream_start", turn_id=turn_id, iteration=iteration, session_id=session_id,
         surface=surface, model=kw.get("model"), provider=kw.get("provider"),
         schema=kw.get("telemetry_schema_version"))

def on_delta(*, turn_id="", delta="", kind="text", iteration=0, **_):
    _log("on_stream_delta", turn_id=turn_id, delta=delta, kind=kind, iteration=iteration)

def on_end(*, turn_id="", final_text="", finished=False, error=None, iteration=0, **_):
    _log("on_stream_end", turn_id=turn_id, final_text=final_text, finished=finished,
         error=error, iteration=iteration)

def on_interim(*, turn_id="", text="", already_streamed=False, iteration=0, **_):
    _log("on_interim_message", turn_id=turn_id, text=text,
         already_streamed=already_streamed, iteration=iteration)

def register(ctx):
    ctx.register_hook("on_stream_start", on_start)
    ctx.register_hook("on_stream_delta", on_delta)
    ctx.register_hook("on_stream_end", on_end)
    ctx.register_hook("on_interim_message", on_interim)
"#;

/// An observer that raises on every delta.
const BROKEN: &str = r#"
def on_delta(**kw):
    raise RuntimeError("observer crashed")

def register(ctx):
    ctx.register_hook("on_stream_delta", on_delta)
"#;

fn hermes_plugin(dir: &Path, name: &str, code: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        format!("name: {name}\nversion: 1.0.0\ndescription: stream observers\nrequires_hermes: \">=0.12.0\"\nhooks:\n  - on_stream_delta\n"),
    )
    .unwrap();
    std::fs::write(dir.join("__init__.py"), code).unwrap();
}

fn write_card(dir: &Path) {
    hermes_plugin(dir, "card", CARD);
}

fn write_broken(dir: &Path) {
    hermes_plugin(dir, "broken", BROKEN);
}

/// Text with a tool call, then the answer.
const LOOK_THEN_ANSWER: &str = r#"
turns:
  - say: "Let me write it down."
    tool_calls:
      - name: write_file
        args: {path: "notes.txt", content: "hello"}
  - say: "All done here."
  - say: "Second turn answer."
"#;

fn events(f: &Fixture) -> Vec<Value> {
    let path = f.home.path().join("plugins/card/events.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn hooks(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["hook"].as_str().unwrap()).collect()
}

/// The deltas of `iteration`, joined.
fn streamed(events: &[Value], iteration: u64) -> String {
    events
        .iter()
        .filter(|e| e["hook"] == "on_stream_delta" && e["iteration"] == iteration)
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

#[test]
fn the_observers_hear_each_model_calls_stream_and_the_interim_text_in_order() {
    let f = Fixture::new(&[("card", write_card)]);
    let agent = f.agent(LOOK_THEN_ANSWER);
    let report = f.turn(&agent, "s1", "write a note");
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("All done here."));
    // The turn's end waited for its observers: everything is heard now.
    let seen = events(&f);
    let mut order: Vec<&str> = hooks(&seen);
    order.dedup();
    assert_eq!(
        order,
        [
            "on_stream_start",
            "on_stream_delta",
            "on_stream_end",
            "on_interim_message",
            "on_stream_start",
            "on_stream_delta",
            "on_stream_end",
        ],
        "{seen:#?}"
    );
    let start = &seen[0];
    assert_eq!(start["session_id"], "s1");
    assert_eq!(start["surface"], "cli");
    assert_eq!(start["provider"], "scripted");
    assert_eq!(start["schema"], "hermes.observer.v1");
    assert_eq!(start["iteration"], 1);
    // One turn: one turn_id on every event.
    let turn_id = start["turn_id"].as_str().unwrap().to_string();
    assert!(!turn_id.is_empty());
    assert!(
        seen.iter().all(|e| e["turn_id"] == turn_id.as_str()),
        "{seen:#?}"
    );
    // The deltas of each call add up to its text, with the kind Hermes names.
    assert_eq!(streamed(&seen, 1), "Let me write it down.");
    assert_eq!(streamed(&seen, 2), "All done here.");
    assert!(seen
        .iter()
        .filter(|e| e["hook"] == "on_stream_delta")
        .all(|e| e["kind"] == "text"));
    let ends: Vec<&Value> = seen
        .iter()
        .filter(|e| e["hook"] == "on_stream_end")
        .collect();
    assert_eq!(ends[0]["final_text"], "Let me write it down.");
    assert_eq!(ends[1]["final_text"], "All done here.");
    assert!(ends
        .iter()
        .all(|e| e["finished"] == true && e["error"].is_null()));
    // The text that came with the tool call, streamed as it is.
    let interim: Vec<&Value> = seen
        .iter()
        .filter(|e| e["hook"] == "on_interim_message")
        .collect();
    assert_eq!(interim.len(), 1, "{seen:#?}");
    assert_eq!(interim[0]["text"], "Let me write it down.");
    assert_eq!(interim[0]["already_streamed"], true);
    assert_eq!(interim[0]["iteration"], 1);

    // The next turn of the session has a turn_id of its own.
    let report = f.turn(&agent, "s1", "and again");
    assert_eq!(report.reply.as_deref(), Some("Second turn answer."));
    let seen = events(&f);
    let last = seen.last().unwrap();
    assert_eq!(last["hook"], "on_stream_end");
    assert_eq!(last["final_text"], "Second turn answer.");
    assert_ne!(last["turn_id"], turn_id.as_str());
}

#[test]
fn a_failing_observer_never_breaks_the_turn_and_the_others_still_hear() {
    let f = Fixture::new(&[("broken", write_broken), ("card", write_card)]);
    let agent = f.agent(LOOK_THEN_ANSWER);
    let report = f.turn(&agent, "s1", "write a note");
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("All done here."));
    let seen = events(&f);
    assert_eq!(streamed(&seen, 2), "All done here.");
    // The failures are the turn's hook errors, named by the hook.
    assert!(
        report
            .hook_errors
            .iter()
            .any(|e| format!("{e:?}").contains("observer crashed")),
        "{:?}",
        report.hook_errors
    );
}

/// A model API that fails after streaming part of an answer.
struct BreaksOff;

impl Provider for BreaksOff {
    fn model(&self) -> String {
        "stub:breaks-off".into()
    }
    fn complete(
        &self,
        _request: ChatRequest,
        stream: Option<UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        if let Some(tx) = stream {
            let _ = tx.send(StreamEvent::TextDelta("Half an ".into()));
        }
        Box::pin(async {
            Err(ProviderError::Api {
                status: 400,
                message: "context too long".into(),
            })
        })
    }
}

#[test]
fn a_failed_model_call_ends_its_stream_unfinished_with_the_error() {
    let f = Fixture::new(&[("card", write_card)]);
    let agent = f.agent_with(Arc::new(BreaksOff));
    let report = f.turn(&agent, "s1", "hello");
    assert!(!report.completed);
    let seen = events(&f);
    assert_eq!(
        hooks(&seen),
        ["on_stream_start", "on_stream_delta", "on_stream_end"],
        "{seen:#?}"
    );
    assert_eq!(seen[0]["provider"], "stub");
    assert_eq!(seen[0]["model"], "breaks-off");
    let end = &seen[2];
    assert_eq!(end["finished"], false);
    assert_eq!(end["final_text"], "");
    assert!(
        end["error"].as_str().unwrap().contains("context too long"),
        "{end}"
    );
    // No interim message: the call had no tool calls.
    assert!(!hooks(&seen).contains(&"on_interim_message"));
}

/// An observer that stalls on every delta, far past the hook budget.
const STALLED: &str = r#"
import asyncio, json, os

LOG = os.path.join(os.path.dirname(__file__), "heard.jsonl")

async def on_delta(*, delta="", **_):
    with open(LOG, "a") as f:
        f.write(json.dumps(delta) + "\n")
    await asyncio.sleep(60)

def register(ctx):
    ctx.register_hook("on_stream_delta", on_delta)
"#;

/// Words streamed by the scripted answer: more than the queue holds.
const WORDS: usize = 1500;

#[test]
fn a_stalled_observer_loses_the_oldest_events_and_never_holds_the_turn() {
    let home = crate::common::home_with(&["stalled"]);
    let plugin = home.path().join("plugins").join("stalled");
    hermes_plugin(&plugin, "stalled", STALLED);
    let words: Vec<String> = (0..WORDS).map(|i| format!("w{i}")).collect();
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        format!("turns:\n  - say: \"{}\"\n", words.join(" ")),
    )
    .unwrap();
    let bundled = crate::common::no_bundled();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(home.path())
        .args(["run", "--model", "scripted", "--script"])
        .arg(&script)
        .args(["--hook-timeout", "1", "go"])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_LOG");
    let out = crate::common::run_bounded(cmd, std::time::Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The turn answered whole.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("w{}", WORDS - 1)), "{stdout}");
    // The queue was full: the oldest events went, and what was still
    // queued at the turn's end was dropped past the budget.
    assert!(
        stderr.contains("event(s) dropped, the observers were too slow for the stream"),
        "{stderr}"
    );
    assert!(
        stderr.contains("still busy at the end of the turn past the hook budget"),
        "{stderr}"
    );
    // The observer heard the first delta; anything after it came from the
    // newest events kept (the oldest were dropped, never the newest).
    let heard: Vec<String> = std::fs::read_to_string(plugin.join("heard.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(heard[0], "w0 ", "{heard:?}");
    assert!(heard.len() < WORDS, "{}", heard.len());
    for later in &heard[1..] {
        let n: usize = later.trim().trim_start_matches('w').parse().unwrap();
        assert!(n >= WORDS - 1024, "{later} was among the oldest dropped");
    }
}
