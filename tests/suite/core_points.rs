//! The turn report's loop-point fields (`model_calls`, `hook_errors`,
//! `aborted`, `ended_by`, `ui_events`), observed through `plughost run
//! --json` with a scripted model and a Flowly plugin.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{home_with, no_bundled, write_plugin};
use serde_json::Value;

const PLUGIN: &str = r#"
import asyncio
from flowly.agent.hooks import SkipAction

def register(ctx):
    ctx.register_hook("pre_llm_call", lambda c: "remember the budget")
    ctx.register_hook("pre_gateway_dispatch", lambda c: SkipAction("spam") if c.event.content == "spam" else None)
    def broken(c):
        return 1 / 0
    ctx.register_hook("post_llm_call", broken)
    async def sleepy(c):
        await asyncio.sleep(30)
    ctx.register_hook("post_tool_call", sleepy)
    ctx.register_tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}}, lambda text="": f"echo {text}")
"#;

const SCRIPT: &str = r#"
turns:
  - say: "Calling."
    tool_calls:
      - name: echo
        args: {text: "hi"}
  - say: "Done: {tool_results}"
"#;

fn setup() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let home = home_with(&["probe"]);
    write_plugin(
        &home.path().join("plugins"),
        "probe",
        "name: probe\n",
        &[("__init__.py", PLUGIN)],
    );
    let script = home.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    (home, no_bundled(), script)
}

fn run(home: &Path, bundled: &Path, args: &[&str]) -> (Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, report)
}

#[test]
fn model_calls_show_what_each_call_was_sent_and_hook_errors_name_each_failure() {
    let (home, bundled, script) = setup();
    let script = script.to_str().unwrap();
    let args = [
        "run",
        "--json",
        "--script",
        script,
        "--model",
        "scripted",
        "--hook-timeout",
        "0.3",
        "--session",
        "s1",
        "hello",
    ];
    let (out, report) = run(home.path(), bundled.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["ended_by"], "answer");
    assert_eq!(report["aborted"], Value::Null);
    assert_eq!(report["ui_events"], serde_json::json!([]));
    assert_eq!(report["completed"], true);

    let calls = report["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call["iteration"], i + 1);
        assert_eq!(call["params"], serde_json::json!({}));
        assert!(call["tools"]
            .as_array()
            .unwrap()
            .contains(&Value::from("echo")));
        let messages = call["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system");
        // No transcript field reaches the model.
        assert!(
            messages.iter().all(|m| m.get("ts").is_none()),
            "{messages:#?}"
        );
        // The injection is in what the model saw...
        let user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
        assert_eq!(
            user["content"],
            "<plugin_context>\nremember the budget\n</plugin_context>\n\nhello"
        );
    }
    // ... the second call saw the tool round, and nothing of the injection was stored.
    let second = calls[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 4, "{second:#?}");
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["content"], "echo hi");
    assert_eq!(report["messages"][0]["content"], "hello");
    let transcript = std::fs::read_to_string(home.path().join("sessions/s1.jsonl")).unwrap();
    assert!(!transcript.contains("remember the budget"), "{transcript}");

    let errors = report["hook_errors"].as_array().unwrap();
    // post_llm_call raised in both iterations; post_tool_call timed out once.
    assert_eq!(errors.len(), 3, "{errors:#?}");
    let raised: Vec<&Value> = errors
        .iter()
        .filter(|e| e["event"] == "post_llm_call")
        .collect();
    assert_eq!(raised.len(), 2);
    assert_eq!(raised[0]["plugin"], "probe");
    assert_eq!(raised[0]["dialect"], "flowly");
    assert_eq!(raised[0]["handler"], "register.<locals>.broken");
    assert_eq!(raised[0]["error"], "ZeroDivisionError: division by zero");
    let slow = errors
        .iter()
        .find(|e| e["event"] == "post_tool_call")
        .unwrap();
    assert_eq!(slow["error"], "timed out after 0.3 s and was skipped");
}

#[test]
fn ended_by_says_how_the_turn_ended() {
    let (home, bundled, script) = setup();
    let script = script.to_str().unwrap();
    let base = [
        "run",
        "--json",
        "--hook-timeout",
        "0.3",
        "--model",
        "scripted",
        "--script",
        script,
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        run(home.path(), bundled.path(), &args).1
    };
    let skipped = with(&["spam"]);
    assert_eq!(skipped["ended_by"], "skipped");
    assert_eq!(skipped["model_calls"], serde_json::json!([]));
    let command = with(&["/help"]);
    assert_eq!(command["ended_by"], "command");
    assert_eq!(command["model_calls"], serde_json::json!([]));
    let capped = with(&["--max-iterations", "1", "--session", "cap", "go"]);
    assert_eq!(capped["ended_by"], "iteration_cap");
    assert_eq!(capped["model_calls"].as_array().unwrap().len(), 1);
}
