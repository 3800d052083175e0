//! The core pipeline and hook policies with native Rust tools and hooks only
//! (no interpreter is started in this test binary).
use std::sync::{Arc, Mutex};

use plughost::core::hooks::{
    HookAction, HookCallback, HookError, HookEvent, HookPayload, HookReturn, ToolCallContext,
};
use plughost::core::registry::{ToolHandler, ToolReturn, ToolSpec};
use plughost::{Host, PluginError, Tool, ToolOutcome};
use serde_json::json;

struct Gated(bool);
impl ToolHandler for Gated {
    fn check(&self) -> Option<Result<bool, PluginError>> {
        Some(if self.0 {
            Ok(true)
        } else {
            Err("no token".into())
        })
    }
    fn call(&self, _ctx: &mut ToolCallContext) -> ToolReturn {
        ToolReturn::Ready(Ok("through".into()))
    }
}

struct Failing;
impl HookCallback for Failing {
    fn call(&self, _e: HookEvent, _p: HookPayload<'_>) -> HookReturn {
        HookReturn::Ready(Err(HookError::raised("broken hook")))
    }
}

fn host(log: Arc<Mutex<Vec<String>>>) -> Host {
    let empty = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (l1, l2, l3, l4) = (log.clone(), log.clone(), log.clone(), log.clone());
    Host::builder()
        .home(home.path())
        .bundled_dir(empty.path())
        .tool(Tool::from_fn("add", "Add two numbers", json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}), |a| {
            Ok((a["a"].as_f64().unwrap() + a["b"].as_f64().unwrap()).to_string())
        }))
        .tool(Tool::from_fn("err", "", json!({}), |_| Err("bad input".into())))
        .tool(Tool::from_async_fn("later", "", json!({}), |_| Box::pin(async { Ok("async native".to_string()) })))
        .tool(Tool::new(ToolSpec { name: "gated".into(), description: String::new(), parameters: json!({}), plugin: "native".into(), ..Default::default() }, Arc::new(Gated(false))))
        .hook_with_priority(HookEvent::ToolGuard, 10, move |_e: HookEvent, p: HookPayload<'_>| {
            if let HookPayload::Tool(c) = p {
                l1.lock().unwrap().push(format!("late:{}", c.tool_name));
            }
            HookAction::Continue
        })
        .hook_with_priority(HookEvent::ToolGuard, -5, move |_e: HookEvent, p: HookPayload<'_>| {
            if let HookPayload::Tool(c) = p {
                l2.lock().unwrap().push(format!("early:{}", c.tool_name));
                if c.tool_name == "add" && c.params.get("a") == Some(&json!(13)) {
                    return HookAction::Block("unlucky".into());
                }
            }
            HookAction::Continue
        })
        .hook(HookEvent::ToolGuard, Failing)
        .hook(HookEvent::ToolDone, move |_e: HookEvent, p: HookPayload<'_>| {
            if let HookPayload::Tool(c) = p {
                l3.lock().unwrap().push(format!("post:{}:{:?}:{:?}", c.tool_name, c.result, c.success));
            }
            HookAction::Continue
        })
        .hook(HookEvent::ResultRewrite, |_e: HookEvent, p: HookPayload<'_>| match p {
            HookPayload::Tool(c) if c.tool_name == "later" => HookAction::Replace("first".into()),
            _ => HookAction::Continue,
        })
        .hook(HookEvent::ResultRewrite, move |_e: HookEvent, p: HookPayload<'_>| {
            if let HookPayload::Tool(c) = p {
                l4.lock().unwrap().push(format!("transform2:{}", c.tool_name));
            }
            HookAction::Replace("second".into())
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn pipeline_policies_with_native_parts() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let host = host(log.clone());

    let r = host.call_tool("later", json!({}), "").await;
    assert_eq!(r.text, "first", "the first replacement wins");
    assert!(
        log.lock()
            .unwrap()
            .contains(&"transform2:later".to_string()),
        "later transform hooks still run"
    );

    let blocked = host.call_tool("add", json!({"a": 13, "b": 1}), "").await;
    assert_eq!(blocked.text, "[blocked: unlucky]");
    assert_eq!(
        blocked.outcome,
        ToolOutcome::Blocked {
            message: "unlucky".into()
        }
    );
    {
        let log = log.lock().unwrap();
        let early = log.iter().position(|l| l == "early:add").unwrap();
        let late = log.iter().position(|l| l == "late:add").unwrap();
        assert!(early < late, "priority orders hooks: {log:?}");
        assert!(
            !log.iter().any(|l| l.starts_with("post:add")),
            "a blocked call fires no post hooks"
        );
    }

    let err = host.call_tool("err", json!({}), "").await;
    assert_eq!(err.text, "second", "transform replaces errors too");
    assert!(log
        .lock()
        .unwrap()
        .contains(&"post:err:Some(\"Error executing err: bad input\"):Some(false)".to_string()));

    let gated = host.call_tool("gated", json!({}), "").await;
    assert_eq!(
        gated.text,
        "Error: gated availability check failed: no token"
    );

    let invalid = host.call_tool("add", json!({"a": 1}), "").await;
    assert!(
        invalid
            .text
            .starts_with("Error: invalid arguments for add:"),
        "{}",
        invalid.text
    );

    let registry = host.registry();
    let failing = registry
        .hooks()
        .entries(HookEvent::ToolGuard)
        .iter()
        .find(|e| e.label.contains("Failing"))
        .unwrap();
    assert!(failing.stats.errors() >= 3 && failing.stats.errors() == failing.stats.calls());
}
