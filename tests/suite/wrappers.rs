//! Wrapper lanes: one registration, a before/after pair around every tool
//! handler, whose state between its halves is its own. Native Rust only
//! (no interpreter in this binary).
use std::sync::{Arc, Mutex};

use plughost::core::dispatch::call_tool;
use plughost::core::hooks::{HookError, HookStats};
use plughost::core::registry::Registry;
use plughost::core::wrappers::{Unwrapped, WrapEntry, WrapState, Wrapped, Wrapper, TOOL_HANDLER};
use plughost::{Tool, ToolOutcome};
use serde_json::json;

type Log = Arc<Mutex<Vec<String>>>;

/// Records its halves; its state is the call's id, so an `after` shown
/// another call's state would say so.
struct Recording {
    name: &'static str,
    log: Log,
    fail_before: bool,
}

impl Wrapper for Recording {
    fn before(&self, call: &Wrapped<'_>) -> Result<WrapState, HookError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} before {}", self.name, call.tool_call_id));
        if self.fail_before {
            return Err(HookError::raised("cannot start the timer"));
        }
        Ok(Box::new(call.tool_call_id.to_string()))
    }

    fn after(
        &self,
        state: WrapState,
        call: &Wrapped<'_>,
        result: &Unwrapped<'_>,
    ) -> Result<(), HookError> {
        let mine = state.downcast::<String>().expect("its own state");
        self.log.lock().unwrap().push(format!(
            "{} after {} (state {mine}, {:?}, {})",
            self.name,
            call.tool_call_id,
            result.outcome.is_ok(),
            result.text
        ));
        Ok(())
    }
}

fn entry(name: &'static str, priority: i32, log: &Log, fail_before: bool) -> WrapEntry {
    WrapEntry {
        owner: "native".into(),
        label: name.into(),
        priority,
        wrapper: Arc::new(Recording {
            name,
            log: log.clone(),
            fail_before,
        }),
        stats: Arc::new(HookStats::default()),
    }
}

fn registry(log: &Log) -> Registry {
    let mut r = Registry::new();
    let tool_log = log.clone();
    r.add_tool(Tool::from_fn("echo", "", json!({}), move |a| {
        tool_log.lock().unwrap().push("handler".into());
        Ok(a["text"].as_str().unwrap_or("").to_string())
    }));
    r.add_tool(Tool::from_fn("boom", "", json!({}), |_| {
        Err("it broke".into())
    }));
    r
}

#[tokio::test]
async fn wrappers_nest_around_the_handler_each_with_its_own_state() {
    let log = Log::default();
    let mut r = registry(&log);
    // Registered inner first: the priority, not the order, decides nesting.
    r.add_wrapper(&TOOL_HANDLER, entry("inner", 5, &log, false))
        .unwrap();
    r.add_wrapper(&TOOL_HANDLER, entry("outer", -5, &log, false))
        .unwrap();
    let got = call_tool(&r, "echo", json!({"text": "hi"}), "s", "c1").await;
    assert_eq!(got.text, "hi");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "outer before c1",
            "inner before c1",
            "handler",
            "inner after c1 (state c1, true, hi)",
            "outer after c1 (state c1, true, hi)",
        ]
    );
}

#[tokio::test]
async fn a_raising_handler_is_still_unwrapped_with_its_failure() {
    let log = Log::default();
    let mut r = registry(&log);
    r.add_wrapper(&TOOL_HANDLER, entry("timer", 0, &log, false))
        .unwrap();
    let got = call_tool(&r, "boom", json!({}), "s", "c2").await;
    assert!(matches!(got.outcome, ToolOutcome::Raised { .. }));
    let log = log.lock().unwrap();
    assert_eq!(log[0], "timer before c2");
    assert!(
        log[1].starts_with("timer after c2 (state c2, false, "),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_failing_before_half_is_counted_gets_no_after_and_the_call_goes_on() {
    let log = Log::default();
    let mut r = registry(&log);
    let broken = entry("broken", 0, &log, true);
    let stats = broken.stats.clone();
    r.add_wrapper(&TOOL_HANDLER, broken).unwrap();
    r.add_wrapper(&TOOL_HANDLER, entry("fine", 1, &log, false))
        .unwrap();
    let got = call_tool(&r, "echo", json!({"text": "on"}), "s", "c3").await;
    assert_eq!(got.text, "on");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "broken before c3",
            "fine before c3",
            "handler",
            "fine after c3 (state c3, true, on)",
        ]
    );
    assert_eq!((stats.calls(), stats.errors()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_see_each_others_state() {
    let log = Log::default();
    let mut r = Registry::new();
    // Both calls are inside their handler at once (the barrier), so both
    // wrappers' states are open together.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    r.add_tool(Tool::from_async_fn("meet", "", json!({}), move |_| {
        let barrier = barrier.clone();
        Box::pin(async move {
            barrier.wait().await;
            Ok("met".to_string())
        })
    }));
    r.add_wrapper(&TOOL_HANDLER, entry("w", 0, &log, false))
        .unwrap();
    let r = Arc::new(r);
    let (a, b) = tokio::join!(
        call_tool(&r, "meet", json!({}), "s", "a"),
        call_tool(&r, "meet", json!({}), "s", "b")
    );
    assert_eq!((a.text.as_str(), b.text.as_str()), ("met", "met"));
    let log = log.lock().unwrap();
    let befores = log.iter().take(2).filter(|l| l.contains("before")).count();
    assert_eq!(befores, 2, "both entered before either left: {log:?}");
    assert!(log.contains(&"w after a (state a, true, met)".to_string()));
    assert!(log.contains(&"w after b (state b, true, met)".to_string()));
}

#[test]
fn a_plain_lane_refuses_a_wrapper_and_names_itself() {
    let log = Log::default();
    let mut r = Registry::new();
    let err = r
        .add_wrapper(
            &plughost::dialects::felix::lanes::BEFORE_TOOL,
            entry("x", 0, &log, false),
        )
        .unwrap_err();
    assert_eq!(
        err,
        "tool_before is not a wrapper lane: subscribe a callback to it instead"
    );
}
