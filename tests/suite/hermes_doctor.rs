//! `plugins doctor` names every Hermes hook a plugin registered that
//! plughost never fires, each with why (issue 21 item 3): a plugin
//! registering the whole newest `VALID_HOOKS` (plus the dispatcher's
//! auxiliary and TTS names) gets one line per silent hook, none of them
//! "not a known event", and no "unknown hook" warning.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::Value;

/// Hermes's hook names, as a plugin author copies them from Hermes.
const NAMES: &[&str] = &[
    "pre_tool_call",
    "post_tool_call",
    "transform_terminal_output",
    "transform_tool_result",
    "transform_llm_output",
    "pre_llm_call",
    "post_llm_call",
    "on_stream_start",
    "on_stream_delta",
    "on_stream_end",
    "on_interim_message",
    "pre_verify",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "transform_api_error_classification",
    "on_session_start",
    "on_session_end",
    "on_session_finalize",
    "on_session_reset",
    "on_skill_lifecycle",
    "subagent_start",
    "subagent_stop",
    "pre_gateway_dispatch",
    "agent_loop_stopped",
    "pre_approval_request",
    "post_approval_response",
    "on_room_member_activity",
    "pre_transcription",
    "kanban_task_claimed",
    "kanban_task_completed",
    "kanban_task_blocked",
    "on_kanban_worker_spawned",
    "on_kanban_worker_exited",
    "on_kanban_worker_stale_claim",
    "on_kanban_task_updated",
    "on_kanban_dispatch_tick",
    "gateway_platform_event",
    "pre_command",
    "pre_auxiliary_call",
    "post_auxiliary_call",
    "pre_tts_synthesis",
];

/// The names plughost's loop fires.
const FIRED: &[&str] = &[
    "pre_verify",
    "pre_tool_call",
    "post_tool_call",
    "transform_terminal_output",
    "transform_tool_result",
    "transform_llm_output",
    "pre_llm_call",
    "post_llm_call",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "on_session_start",
    "on_session_end",
    "on_session_finalize",
    "on_session_reset",
    "subagent_start",
    "subagent_stop",
    "pre_gateway_dispatch",
    "pre_command",
    "on_stream_start",
    "on_stream_delta",
    "on_stream_end",
    "on_interim_message",
    "gateway_platform_event",
];

#[test]
fn doctor_lists_every_silent_hermes_hook_with_its_reason() {
    let hermes = tempfile::tempdir().unwrap();
    let names: Vec<String> = NAMES.iter().map(|n| format!("{n:?}")).collect();
    let init = format!(
        "NAMES = [{}]\n\ndef register(ctx):\n    for name in NAMES:\n        ctx.register_hook(name, lambda **kw: None)\n",
        names.join(", ")
    );
    write_plugin(
        &hermes.path().join("plugins"),
        "allhooks",
        "name: allhooks\n",
        &[("__init__.py", &init)],
    );
    std::fs::write(
        hermes.path().join("config.yaml"),
        "plugins:\n  enabled: [allhooks]\n",
    )
    .unwrap();
    let home = home_with(&[]);
    let bundled = no_bundled();
    let doctor = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(["plugins", "doctor"])
            .args(json.then_some("--json"))
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(60))
    };
    let out = doctor(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("unknown hook"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plugin = report["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "allhooks")
        .expect("allhooks in the report");
    assert_eq!(plugin["status"], "loaded", "{plugin:#}");
    let silent: BTreeSet<&str> = plugin["silent_hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["event"].as_str().unwrap())
        .collect();
    let expected: BTreeSet<&str> = NAMES
        .iter()
        .copied()
        .filter(|n| !FIRED.contains(n))
        .collect();
    assert_eq!(silent, expected);
    for hook in plugin["silent_hooks"].as_array().unwrap() {
        let reason = hook["reason"].as_str().unwrap();
        assert!(reason.ends_with("it never fires"), "{hook}");
        assert!(!reason.contains("not a known event"), "{hook}");
        if hook["event"].as_str().unwrap().contains("kanban") {
            assert!(reason.contains("no Kanban board"), "{hook}");
        }
    }
    let text = String::from_utf8_lossy(&doctor(false).stdout).into_owned();
    assert!(
        text.contains("hook kanban_task_completed: plughost has no Kanban board"),
        "{text}"
    );
    assert!(
        text.contains("hook pre_tts_synthesis: plughost has no text-to-speech"),
        "{text}"
    );
}
