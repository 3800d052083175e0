//! docs/<dialect>-events.md is what `plughost::event_reference::render`
//! makes of HOOK_SPECS and of what each dialect's recording plugin saw when
//! every event was fired at it. Regenerate with
//! `PLUGHOST_UPDATE_DOCS=1 cargo test --test event_reference`.
use crate::common;

use std::path::Path;

use plughost::core::hooks::{
    GatewayContext, HookEvent, HookPayload, InboundMessage, LlmCallContext, LoopContext,
    LoopToolCall, SessionContext, SubagentStopContext, ToolCallContext, TurnScope,
};
use plughost::event_reference::{dialects, render, Captured, DialectDoc};
use plughost::Host;
use serde_json::json;

/// Fire `event` on `host` with a context filled as the agent loop fills it
/// at that point; the answers.
async fn fire(host: &Host, event: HookEvent) -> Vec<plughost::core::hooks::HookAction> {
    use HookEvent::*;
    match event {
        ToolGuard | ToolDone | ResultRewrite | ExecOutputRewrite => {
            let after = event != ToolGuard;
            let mut ctx = ToolCallContext {
                session_id: "s1".into(),
                tool_name: "exec".into(),
                params: json!({"command": "ls"}).as_object().unwrap().clone(),
                tool_call_id: "call_1".into(),
                result: after.then(|| "out".to_string()),
                duration_ms: if after { 1.5 } else { 0.0 },
                success: after.then_some(true),
                ..Default::default()
            };
            host.fire(event, HookPayload::Tool(&mut ctx)).await
        }
        PromptContext | ExchangeDone | RequestSending | ResponseArrived | ReplyRewrite
        | RequestFailed => {
            let after = matches!(event, ExchangeDone | ResponseArrived | ReplyRewrite);
            let mut ctx = LlmCallContext {
                session_id: "s1".into(),
                model: "scripted".into(),
                messages: vec![json!({"role": "user", "content": "hi"})],
                system: "You are helpful.".into(),
                user_message: "hi".into(),
                response: if after {
                    json!({"content": "hello"})
                } else if event == RequestFailed {
                    json!({"error": "connection refused"})
                } else {
                    json!(null)
                },
                assistant_message: if after { "hello".into() } else { String::new() },
                ..Default::default()
            };
            host.fire(event, HookPayload::Llm(&mut ctx)).await
        }
        SessionOpened | TurnClosed | SessionClosing | SessionCleared => {
            let mut ctx = SessionContext {
                session_id: "s1".into(),
                model: "scripted".into(),
                platform: "cli".into(),
                completed: true,
                ..Default::default()
            };
            host.fire(event, HookPayload::Session(&mut ctx)).await
        }
        SubagentDone | SubagentBegun => {
            let mut ctx = SubagentStopContext {
                session_id: "s1".into(),
                subagent_id: "s1/sub-1".into(),
                reason: "completed".into(),
                ..Default::default()
            };
            host.fire(event, HookPayload::Subagent(&mut ctx)).await
        }
        HostStart | InputReceived | CompactBefore | CompactFailed | HistoryReady | PromptFinal
        | ModelCallStart | ModelCallError | ModelReplied | ToolExecuting | ResponseBeforeSend
        | ResponsePersisted | TurnEnded | Lane(_) => {
            unreachable!("{event} is a loop point, not in HookEvent::ALL")
        }
        InboundGate => {
            let mut ctx = GatewayContext {
                session_id: "s1".into(),
                event: InboundMessage {
                    content: "hi".into(),
                    channel: "cli".into(),
                    sender_id: "user".into(),
                    session_key: "s1".into(),
                    ..Default::default()
                },
                gateway: "cli".into(),
                ..Default::default()
            };
            host.fire(event, HookPayload::Gateway(&mut ctx)).await
        }
    }
}

/// Fire loop point `point` on `host` with a context filled as the agent
/// loop fills it (every field a point may show), the turn ended by `ended_by`.
async fn fire_loop(host: &Host, point: HookEvent, ended_by: &str) {
    let object = |v: serde_json::Value| v.as_object().unwrap().clone();
    let mut ctx = LoopContext {
        session_id: "s1".into(),
        model: "scripted:demo".into(),
        params: object(json!({"temperature": 0.2})),
        messages: vec![
            json!({"role": "system", "content": "You are helpful."}),
            json!({"role": "user", "content": "hi"}),
        ],
        kept: vec![json!({"role": "user", "content": "hi"})],
        tools: vec![
            json!({"type": "function", "function": {"name": "exec", "description": "Run a command", "parameters": {"type": "object"}}}),
        ],
        text: "hi".into(),
        reply: json!({"role": "assistant", "content": "hello", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "exec", "arguments": "{\"command\": \"ls\"}"}}]}),
        stop_reason: "tool_calls".into(),
        usage: object(json!({"prompt_tokens": 3, "completion_tokens": 2})),
        tool_call: LoopToolCall {
            id: "call_1".into(),
            name: "exec".into(),
            arguments: json!({"command": "ls"}),
        },
        result: "out".into(),
        duration_ms: 1.5,
        error: Some("connection refused".into()),
        ended_by: ended_by.into(),
        reason: Some("why".into()),
        plugins: vec!["recorder".into()],
        turn: Some(std::sync::Arc::new(TurnScope::default())),
        ..Default::default()
    };
    host.fire(point, HookPayload::Loop(&mut ctx)).await;
}

/// Where a dialect's plugins go: plughost's own plugin directory, or the
/// dialect's (Hermes: `$HERMES_HOME/plugins`).
fn plugin_root(doc: &DialectDoc, home: &Path, hermes_home: &Path) -> std::path::PathBuf {
    match doc.name {
        "hermes" => hermes_home.join("plugins"),
        _ => home.join("plugins"),
    }
}

fn capture(doc: &DialectDoc, rt: &tokio::runtime::Runtime) -> Captured {
    let home = common::home_with(&["recorder", "raiser"]);
    let hermes_home = tempfile::tempdir().unwrap();
    let bundled = common::no_bundled();
    // A process of its own (`alone!`): nothing else reads the environment meanwhile.
    std::env::set_var("HERMES_HOME", hermes_home.path());
    let root = plugin_root(doc, home.path(), hermes_home.path());
    common::write_plugin(&root, "recorder", "", doc.recorder);
    common::write_plugin(&root, "raiser", "", doc.raiser);
    let build = |enable: &[&str]| {
        Host::builder()
            .home(home.path())
            .bundled_dir(bundled.path())
            .enable(enable.iter().copied())
            .disable(
                ["raiser", "recorder"]
                    .into_iter()
                    .filter(|k| !enable.contains(k)),
            )
            .build()
            .unwrap()
    };
    let recording = build(&["recorder"]);
    let loaded: Vec<_> = recording
        .plugins()
        .iter()
        .filter(|p| p.loaded)
        .map(|p| p.key.clone())
        .collect();
    assert_eq!(
        loaded,
        ["recorder"],
        "{}: {:?}",
        doc.name,
        recording.plugins()
    );
    for event in HookEvent::ALL {
        rt.block_on(fire(&recording, event));
    }
    if doc.own_events.is_some() {
        for point in plughost::dialects::loop_lanes() {
            if point == HookEvent::TurnEnded {
                for ended_by in ["aborted", "interrupted", "error"] {
                    rt.block_on(fire_loop(&recording, point, ended_by));
                }
            } else {
                rt.block_on(fire_loop(&recording, point, "answer"));
            }
        }
    }
    // A Codumentor plugin has no tool at load time: its recorder writes a file.
    let text = match doc.name {
        "codumentor" => {
            std::fs::read_to_string(root.join("recorder/record.json")).unwrap_or_default()
        }
        _ => {
            rt.block_on(recording.call_tool("recorded", json!({}), ""))
                .text
        }
    };
    let mut captured: Captured = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: the recorder answered {text:?}: {e}", doc.name));
    drop(recording);
    let raising = build(&["raiser"]);
    // The events by the dialect's own names (its rows'), as the reference lists them.
    let rows = plughost::dialects::by_name(doc.name).map_or(&[][..], |d| d.events());
    for event in HookEvent::ALL {
        if !rt.block_on(fire(&raising, event)).is_empty() {
            let name = rows
                .iter()
                .find(|r| r.lane == event)
                .map_or(event.name(), |r| r.name);
            captured.fails_closed.push(name.to_string());
        }
    }
    captured
}

#[test]
fn docs_event_references_match_the_hook_table_and_the_dialects() {
    crate::alone!(docs_event_references_match_the_hook_table_and_the_dialects);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let update = std::env::var("PLUGHOST_UPDATE_DOCS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for doc in dialects() {
        let captured = capture(doc, &rt);
        let rendered = render(doc, &captured).unwrap_or_else(|e| panic!("{e}"));
        let path = docs.join(format!("{}-events.md", doc.name));
        if update {
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != rendered {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from what the code renders; regenerate with: PLUGHOST_UPDATE_DOCS=1 cargo test --test event_reference",
        stale.join(", ")
    );
}
