//! The worker's side of a [`Request::Batch`](super::protocol::Request::Batch):
//! a tool call and the plugin's own hooks on it, run in the pipeline's
//! order on one context (as in-process: the dialect's per-call state, the
//! arguments a `pre_tool_call` hook edited in place, carry from hook to
//! tool to hook), each step answered as soon as what follows it might
//! take a while.
//!
//! Answers wait for a step that ran quickly the last time ([`FastSteps`]):
//! a call of a quick tool with quick hooks is answered in one write, so
//! plughost's reader wakes once per call instead of once per step (each
//! wake-up is a thread switch on both sides, most of what a hook added).
//! Before a step that has not run yet, or ran slowly, the answers so far
//! are written: plughost bounds each hook's answer by its time limit, so an
//! answer must not wait behind a long tool. A step that was quick and then
//! hangs holds the earlier answers of its call with it; plughost's limit on
//! the earliest of them then stops the worker, as the hung step's own
//! limit would have.
//!
//! The worker goes on past a step only where plughost is certain to go
//! on the same way: past the `pre_tool_call` hooks only if every one of
//! them answered "continue" (a block, a raised hook, a wrong shape: plughost
//! decides, with its own fail-open or fail-closed rules, and runs the tool
//! itself if it goes on), past the tool only if it succeeded (plughost
//! renders a failure, in strings the worker does not know). `post_tool_call`
//! observes, and every `transform_tool_result` hook runs, whatever the others
//! answered, in-process as here. The step it stops after says `last`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::protocol::{event_named, ActionWire, Reply, Step, ToolCallWire};
use crate::core::hooks::{HookAction, HookEntry, HookError, HookEvent, HookPayload, HookReturn};
use crate::core::points::BoxFuture;
use crate::core::registry::{Tool, ToolReturn};

/// A step that ran in less than this is expected to again: the answers
/// before it wait for it.
const QUICK: Duration = Duration::from_millis(2);

/// The steps (tools by name, hooks by number) whose last run was quick.
#[derive(Default)]
pub(super) struct FastSteps(Mutex<(HashSet<String>, HashSet<usize>)>);

impl FastSteps {
    fn is_fast(&self, tool: &str, step: Option<&Step>) -> bool {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match step {
            None => true,
            Some(Step::Tool) => known.0.contains(tool),
            Some(Step::Hook { index, .. }) => known.1.contains(index),
        }
    }

    fn note(&self, tool: &str, step: &Step, took: Duration) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let quick = took < QUICK;
        match step {
            Step::Tool if quick => drop(known.0.insert(tool.to_string())),
            Step::Tool => drop(known.0.remove(tool)),
            Step::Hook { index, .. } if quick => drop(known.1.insert(*index)),
            Step::Hook { index, .. } => drop(known.1.remove(index)),
        }
    }
}

/// Whether the answers so far are written now (`Flush::Now`) or wait for
/// the next step's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Flush {
    Now,
    Hold,
}

/// Run `steps` of a call of `tool` (`None`: not in this worker) with the
/// plugin's `hooks`; `send(reply, last, flush)` answers each step.
pub(super) fn run(
    tool: Option<&Tool>,
    hooks: &[HookEntry],
    fast: &FastSteps,
    call: ToolCallWire,
    steps: &[Step],
    send: &mut dyn FnMut(Reply, bool, Flush),
) {
    let Some(tool) = tool else {
        return send(
            refused("no such tool in this worker".into()),
            true,
            Flush::Now,
        );
    };
    let name = tool.spec.name.as_str();
    // Write the answers so far unless the step after `at` is expected quick.
    let flush_before = |at: usize, stop: bool| {
        if stop || !fast.is_fast(name, steps.get(at + 1)) {
            Flush::Now
        } else {
            Flush::Hold
        }
    };
    let mut ctx = call.into_context(None);
    // The result the post-call hooks are shown: the tool's, as plughost
    // keeps it (an isolated hook's answer never edits it in place).
    let mut text = String::new();
    // A `pre_tool_call` hook answered something other than "continue".
    let mut pre_refused = false;
    for (at, step) in steps.iter().enumerate() {
        let next_is = |event: HookEvent| matches!(steps.get(at + 1), Some(Step::Hook { event: e, .. }) if event_named(e) == Some(event));
        let done = at + 1 == steps.len();
        match step {
            Step::Tool => {
                let started = Instant::now();
                let (reply, ok) = run_tool(tool, &mut ctx);
                fast.note(name, step, started.elapsed());
                if let Ok(result) = &ok {
                    text = result.clone();
                }
                let stop = done || ok.is_err();
                send(reply, stop, flush_before(at, stop));
                if stop {
                    return;
                }
                ctx.success = Some(true);
            }
            Step::Hook { event, index } => {
                let (Some(event), Some(entry)) = (event_named(event), hooks.get(*index)) else {
                    return send(
                        refused(format!("no hook {event} number {index}")),
                        true,
                        Flush::Now,
                    );
                };
                if event != HookEvent::PreToolCall {
                    ctx.result = Some(text.clone());
                }
                ctx.stage = Some(event);
                let started = Instant::now();
                let answer = match entry.callback.call(event, HookPayload::Tool(&mut ctx)) {
                    HookReturn::Ready(answer) => answer,
                    HookReturn::Pending(fut) => wait(fut).unwrap_or_else(Err),
                };
                fast.note(name, step, started.elapsed());
                let pre = event == HookEvent::PreToolCall;
                pre_refused |= pre && !matches!(answer, Ok(HookAction::Continue));
                let reply = Reply::Hook {
                    answer: answer.map(ActionWire::from).map_err(Into::into),
                    params: ctx.dialect.edited_params(),
                    after: None,
                };
                // After the last `pre_tool_call` hook: stop unless all went on.
                let stop = done || (pre && pre_refused && !next_is(HookEvent::PreToolCall));
                send(reply, stop, flush_before(at, stop));
                if stop {
                    return;
                }
            }
        }
    }
}

/// Run the tool on the batch's context: its reply, and its result.
fn run_tool(
    tool: &Tool,
    ctx: &mut crate::core::hooks::ToolCallContext,
) -> (Reply, Result<String, ()>) {
    // As the pipeline does: a handler reading the Rust arguments gets the
    // edits the hooks made in place.
    if tool.handler.reads_rust_params() {
        if let Some(edited) = ctx.dialect.edited_params() {
            ctx.params = edited;
        }
    }
    let started = Instant::now();
    let result = match tool.handler.call(ctx) {
        ToolReturn::Ready(result) => result,
        ToolReturn::Pending(fut) => wait(fut).unwrap_or_else(|e| Err(plugin_error(e))),
    };
    ctx.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(text) => (
            Reply::Tool {
                result: Ok(text.clone()),
            },
            Ok(text),
        ),
        Err(error) => (
            Reply::ToolFailed {
                fatal: tool.handler.fatal(&error),
                error,
            },
            Err(()),
        ),
    }
}

fn plugin_error(e: HookError) -> crate::core::outcome::PluginError {
    match e {
        HookError::Raised(p) => p,
        other => crate::core::outcome::PluginError::native(other.to_string()),
    }
}

fn refused(problem: String) -> Reply {
    Reply::Refused { problem }
}

/// Wait on this thread for an async handler's future, run on the
/// runtime's tokio threads as any async handler of the worker is.
fn wait<T: Send + 'static>(fut: BoxFuture<T>) -> Result<T, HookError> {
    let Some(rt) = crate::runtime::Runtime::get() else {
        return Err(HookError::NotRun(
            "the worker's runtime is not running".into(),
        ));
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.tokio().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| HookError::NotRun("the handler's future was dropped".into()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::core::hooks::{HookCallback, HookStats};
    use crate::core::registry::{ToolHandler, ToolSpec};

    /// Sleeps as long as it is told, in milliseconds.
    struct Sleepy(Arc<AtomicU64>);

    impl ToolHandler for Sleepy {
        fn call(&self, _ctx: &mut crate::core::hooks::ToolCallContext) -> ToolReturn {
            std::thread::sleep(Duration::from_millis(self.0.load(Ordering::SeqCst)));
            ToolReturn::Ready(Ok("done".into()))
        }
    }

    impl HookCallback for Sleepy {
        fn call(&self, _event: HookEvent, _payload: HookPayload<'_>) -> HookReturn {
            std::thread::sleep(Duration::from_millis(self.0.load(Ordering::SeqCst)));
            HookReturn::Ready(Ok(HookAction::Continue))
        }
    }

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
            plugin: "p".into(),
            toolset: String::new(),
            requires_env: Vec::new(),
        }
    }

    fn hook(delay: &Arc<AtomicU64>) -> HookEntry {
        HookEntry {
            owner: "p".into(),
            label: "p.hook".into(),
            priority: 0,
            callback: Arc::new(Sleepy(delay.clone())),
            stats: Arc::new(HookStats::default()),
        }
    }

    /// The flush decision after each step of one call.
    fn flushes(tool: &Tool, hooks: &[HookEntry], fast: &FastSteps) -> Vec<Flush> {
        let steps = [
            Step::Hook {
                event: "pre_tool_call".into(),
                index: 0,
            },
            Step::Tool,
            Step::Hook {
                event: "post_tool_call".into(),
                index: 1,
            },
        ];
        let mut seen = Vec::new();
        let call = ToolCallWire {
            tool_name: tool.spec.name.clone(),
            ..Default::default()
        };
        run(Some(tool), hooks, fast, call, &steps, &mut |_, _, f| {
            seen.push(f)
        });
        seen
    }

    #[test]
    fn answers_wait_only_for_steps_that_were_quick_last_time() {
        let tool_delay = Arc::new(AtomicU64::new(0));
        let hook_delay = Arc::new(AtomicU64::new(0));
        let tool = Tool::new(spec("t"), Arc::new(Sleepy(tool_delay.clone())));
        let hooks = [hook(&hook_delay), hook(&hook_delay)];
        let fast = FastSteps::default();
        use Flush::{Hold, Now};
        // Never run: every answer is written before the next step runs.
        assert_eq!(flushes(&tool, &hooks, &fast), [Now, Now, Now]);
        // All quick last time: one write, after the last step.
        assert_eq!(flushes(&tool, &hooks, &fast), [Hold, Hold, Now]);
        // The tool is slow this time: held until it is done (it was quick
        // before), but the next call writes the pre hook's answer first.
        tool_delay.store(5, Ordering::SeqCst);
        assert_eq!(flushes(&tool, &hooks, &fast), [Hold, Hold, Now]);
        assert_eq!(flushes(&tool, &hooks, &fast), [Now, Hold, Now]);
        // Quick again: held again.
        tool_delay.store(0, Ordering::SeqCst);
        assert_eq!(flushes(&tool, &hooks, &fast), [Now, Hold, Now]);
        assert_eq!(flushes(&tool, &hooks, &fast), [Hold, Hold, Now]);
    }
}
