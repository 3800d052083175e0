//! The answer point (`Point::AnswerReady`): a hook keeps a turn going once
//! the model answered. Hermes's `pre_verify` (issue 52 item 2), in the
//! shape of the public plugins that use it (a keyword-only callback taking
//! `**_`, throttled by `attempt`, scoped by `changed_paths`), and Claude
//! Code's Stop hook answering `decision: "block"` (issue 48), each on disk,
//! through an agent turn with the scripted model and the built-in tools.

use std::path::Path;

use serde_json::{json, Value};

use crate::claude_hooks::Fixture;

/// A Hermes plugin whose `pre_verify` hook records its keywords and asks
/// for tests once (Hermes's `attempt` throttle).
const VERIFIER: &str = r#"
import json, os

LOG = os.path.join(os.path.dirname(__file__), "calls.jsonl")

def _on_pre_verify(*, session_id="", attempt=0, changed_paths=None, final_response="", **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps({"session_id": session_id, "attempt": attempt,
                            "changed_paths": changed_paths, "final_response": final_response,
                            "platform": kw.get("platform"), "model": kw.get("model"),
                            "coding": kw.get("coding")}) + "\n")
    if attempt:
        return None
    return {"action": "continue", "message": "Run the tests for " + ", ".join(changed_paths) + " before you finish."}

def register(ctx):
    ctx.register_hook("pre_verify", _on_pre_verify)
"#;

/// A Hermes plugin whose `pre_verify` always asks for more.
const NAGGER: &str = r#"
import os

LOG = os.path.join(os.path.dirname(__file__), "calls.log")

def nag(**kw):
    with open(LOG, "a") as f:
        f.write("%d\n" % kw["attempt"])
    return {"decision": "block", "reason": "not yet"}

def register(ctx):
    ctx.register_hook("pre_verify", nag)
"#;

/// A Hermes plugin whose `pre_verify` raises.
const BROKEN: &str = r#"
def boom(**kw):
    raise RuntimeError("verifier crashed")

def register(ctx):
    ctx.register_hook("pre_verify", boom)
"#;

fn hermes_plugin(dir: &Path, name: &str, code: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        format!("name: {name}\nversion: 1.0.0\ndescription: pre_verify\nrequires_hermes: \">=0.12.0\"\nhooks:\n  - pre_verify\n"),
    )
    .unwrap();
    std::fs::write(dir.join("__init__.py"), code).unwrap();
}

fn write_verifier(dir: &Path) {
    hermes_plugin(dir, "verifier", VERIFIER);
}

fn write_nagger(dir: &Path) {
    hermes_plugin(dir, "nagger", NAGGER);
}

fn write_broken(dir: &Path) {
    hermes_plugin(dir, "broken", BROKEN);
}

/// A file written, a first answer, then the answer after the nudge.
const EDIT_THEN_ANSWER: &str = r#"
turns:
  - tool_calls:
      - name: write_file
        args: {path: "calc.py", content: "def add(a, b):\n    return a + b\n"}
  - say: "Done: calc.py written."
  - say: "Tests run: all pass."
  - say: "third answer"
  - say: "fourth answer"
  - say: "fifth answer"
"#;

fn calls(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn pre_verify_continues_a_turn_that_edited_files_once_with_its_message() {
    let f = Fixture::new(&[("verifier", write_verifier)]);
    let agent = f.agent(EDIT_THEN_ANSWER);
    let report = f.turn(&agent, "s1", "write an adder");
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("Tests run: all pass."));
    // The first answer stays as an interim message, the nudge follows it.
    let roles: Vec<(&str, &str)> = report
        .messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let at = roles
        .iter()
        .position(|r| *r == ("assistant", "Done: calc.py written."))
        .unwrap_or_else(|| panic!("{roles:?}"));
    assert_eq!(
        roles[at + 1],
        ("user", "Run the tests for calc.py before you finish.")
    );
    assert_eq!(roles.last().unwrap().1, "Tests run: all pass.");
    // Hermes's keywords, at each answer; the second call lets it finish.
    let seen = calls(&f.home.path().join("plugins/verifier/calls.jsonl"));
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["session_id"], "s1");
    assert_eq!(seen[0]["attempt"], 0);
    assert_eq!(seen[0]["changed_paths"], json!(["calc.py"]));
    assert_eq!(seen[0]["final_response"], "Done: calc.py written.");
    assert_eq!(seen[0]["platform"], "cli");
    assert!(seen[0]["coding"].is_boolean(), "{seen:?}");
    assert_eq!(seen[1]["attempt"], 1);
    assert_eq!(seen[1]["final_response"], "Tests run: all pass.");
    f.rt.block_on(agent.shutdown());
}

#[test]
fn pre_verify_is_not_called_when_the_turn_edited_no_file() {
    let f = Fixture::new(&[("verifier", write_verifier)]);
    let agent = f.agent("turns:\n  - say: \"hello\"\n");
    let report = f.turn(&agent, "s1", "hi");
    assert_eq!(report.reply.as_deref(), Some("hello"));
    assert!(calls(&f.home.path().join("plugins/verifier/calls.jsonl")).is_empty());
    f.rt.block_on(agent.shutdown());
}

#[test]
fn a_hook_that_always_continues_is_bounded_at_three_continuations() {
    let f = Fixture::new(&[("nagger", write_nagger)]);
    let agent = f.agent(EDIT_THEN_ANSWER);
    let report = f.turn(&agent, "s1", "write an adder");
    assert!(report.completed, "{:?}", report.error);
    // Three continuations (Claude Code's `block` shape read too), then the
    // fourth answer stands without the hook being asked again.
    let attempts = std::fs::read_to_string(f.home.path().join("plugins/nagger/calls.log")).unwrap();
    assert_eq!(attempts, "0\n1\n2\n");
    assert_eq!(report.reply.as_deref(), Some("fourth answer"));
    let nudges = report
        .messages
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == "not yet")
        .count();
    assert_eq!(nudges, 3);
    f.rt.block_on(agent.shutdown());
}

#[test]
fn a_pre_verify_hook_that_raises_lets_the_turn_finish_and_is_reported() {
    let f = Fixture::new(&[("broken", write_broken)]);
    let agent = f.agent(EDIT_THEN_ANSWER);
    let report = f.turn(&agent, "s1", "write an adder");
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("Done: calc.py written."));
    assert_eq!(report.hook_errors.len(), 1, "{:?}", report.hook_errors);
    assert_eq!(report.hook_errors[0].event, "pre_verify");
    assert!(
        report.hook_errors[0].error.contains("verifier crashed"),
        "{:?}",
        report.hook_errors
    );
    f.rt.block_on(agent.shutdown());
}

/// A Claude Code Stop hook in the shape of the public "keep working"
/// hooks: it blocks once, and lets the turn stop when `stop_hook_active`.
const STOP_ONCE: &str = r#"input=$(cat)
printf '%s\n' "$input" >> "$CLAUDE_PLUGIN_DATA/stop.jsonl"
case "$input" in
  *'"stop_hook_active":true'*) exit 0 ;;
esac
echo '{"decision": "block", "reason": "Also update CHANGELOG.md."}'
"#;

/// A SubagentStop hook that blocks a sub-agent once with exit 2.
const SUBAGENT_ONCE: &str = r#"input=$(cat)
printf '%s\n' "$input" >> "$CLAUDE_PLUGIN_DATA/subagent.jsonl"
case "$input" in
  *'"stop_hook_active":true'*) exit 0 ;;
esac
echo "the sub-agent must cite its source" >&2
exit 2
"#;

fn write_stopper(dir: &Path) {
    for d in [".claude-plugin", "hooks"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "stopper", "version": "1.0.0", "description": "stop hooks"}).to_string(),
    )
    .unwrap();
    let cmd = |c: &str| json!({"hooks": [{"type": "command", "command": c}]});
    let hooks = json!({"hooks": {
        "Stop": [cmd("sh \"${CLAUDE_PLUGIN_ROOT}/hooks/stop.sh\"")],
        "SubagentStop": [cmd("sh \"${CLAUDE_PLUGIN_ROOT}/hooks/subagent.sh\"")]
    }});
    std::fs::write(dir.join("hooks/hooks.json"), hooks.to_string()).unwrap();
    std::fs::write(dir.join("hooks/stop.sh"), STOP_ONCE).unwrap();
    std::fs::write(dir.join("hooks/subagent.sh"), SUBAGENT_ONCE).unwrap();
}

#[test]
fn a_claude_stop_hook_that_blocks_continues_the_turn_with_its_reason() {
    let f = Fixture::new(&[("stopper", write_stopper)]);
    let agent = f.agent("turns:\n  - say: \"first\"\n  - say: \"second, changelog updated\"\n");
    let report = f.turn(&agent, "s1", "fix it");
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("second, changelog updated"));
    assert!(
        report
            .messages
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == "Also update CHANGELOG.md."),
        "{:?}",
        report.messages
    );
    let seen = calls(&f.data("stopper").join("stop.jsonl"));
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["hook_event_name"], "Stop");
    assert_eq!(seen[0]["stop_hook_active"], false);
    assert_eq!(seen[0]["last_assistant_message"], "first");
    assert_eq!(seen[1]["stop_hook_active"], true);
    // SubagentStop never fired: no sub-agent ran.
    assert!(calls(&f.data("stopper").join("subagent.jsonl")).is_empty());
    assert!(report.hook_errors.is_empty(), "{:?}", report.hook_errors);
    f.rt.block_on(agent.shutdown());
}

#[test]
fn a_subagent_stop_hook_exiting_2_continues_the_sub_agent_with_its_stderr() {
    let f = Fixture::new(&[("stopper", write_stopper)]);
    // The parent delegates; the sub-agent answers twice (once blocked);
    // then the parent answers.
    let script = r#"
turns:
  - tool_calls:
      - name: delegate
        args: {task: "find the source"}
  - say: "sub: found it"
  - say: "sub: found it, per the README"
  - say: "parent: {tool_results}"
"#;
    let agent = f.agent(script);
    let report = f.turn(&agent, "s1", "go");
    assert!(report.completed, "{:?}", report.error);
    let seen = calls(&f.data("stopper").join("subagent.jsonl"));
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["hook_event_name"], "SubagentStop");
    assert_eq!(seen[0]["stop_hook_active"], false);
    assert_eq!(seen[0]["last_assistant_message"], "sub: found it");
    assert_eq!(seen[1]["stop_hook_active"], true);
    // The sub-agent's second answer is what the parent got.
    let reply = report.reply.clone().unwrap_or_default();
    assert!(reply.contains("per the README"), "{reply}");
    f.rt.block_on(agent.shutdown());
}
