//! The worker's side of a [`Request::Batch`](super::protocol::Request::Batch):
//! a tool call and the plugin's own hooks on it, run in the pipeline's
//! order on one context (as in-process: the dialect's per-call state, the
//! arguments a `pre_tool_call` hook edited in place, carry from hook to
//! tool to hook), each step answered in order.
//!
//! The worker goes on past a step only where plughost is certain to go
//! on the same way: past the `pre_tool_call` hooks only if every one of
//! them answered "continue" (a block, a raised hook, a wrong shape: plughost
//! decides, with its own fail-open or fail-closed rules, and runs the tool
//! itself if it goes on), past the tool only if it succeeded (plughost
//! renders a failure, in strings the worker does not know). `post_tool_call`
//! observes, and every `transform_tool_result` hook runs, whatever the others
//! answered, in-process as here. The step it stops after says `last`.
//!
//! The answers of consecutive hooks wait for each other when the next
//! hook ran quickly the last time ([`QuickHooks`]): the `post_tool_call`
//! and `transform_tool_result` answers of a call go out in one write, so
//! plughost's reader wakes once for them instead of once per hook (each
//! wake-up is a thread switch on both sides). The answers up to the tool,
//! and the tool's own, are always written at once: a hook's answer never
//! waits behind the tool (plughost bounds it by the hook's time limit),
//! and a worker that dies while running the tool or a later hook leaves
//! plughost every answer given before, as with one write per step (so a
//! tool is never sent again after a crash it may have caused half-way).
//! A hook that was quick and then hangs holds the earlier hooks' answers
//! of its run; plughost's limit on the earliest stops the worker, at about
//! the time the hung hook's own limit would have.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::protocol::{event_named, ActionWire, Reply, Step, ToolCallWire};
use crate::core::hooks::{HookAction, HookEntry, HookError, HookEvent, HookPayload, HookReturn};
use crate::core::points::BoxFuture;
use crate::core::registry::{Tool, ToolReturn};

/// A hook that ran in less than this is expected to again: the answers
/// of the hooks before it wait for it.
const QUICK: Duration = Duration::from_millis(2);

/// The hooks (by number) whose last run was quick.
#[derive(Default)]
pub(super) struct QuickHooks(Mutex<HashSet<usize>>);

impl QuickHooks {
    fn is_fast(&self, step: Option<&Step>) -> bool {
        match step {
            Some(Step::Hook { index, .. }) => self
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(index),
            // The tool's answer and those before it go out at once.
            Some(Step::Tool) | None => false,
        }
    }

    fn note(&self, index: usize, took: Duration) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if took < QUICK {
            known.insert(index);
        } else {
            known.remove(&index);
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
    fast: &QuickHooks,
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
    // Write the answers so far unless the step after `at` is a hook
    // expected to be quick (never after the tool, nor before it).
    let flush_before = |at: usize, stop: bool| {
        if stop || matches!(steps[at], Step::Tool) || !fast.is_fast(steps.get(at + 1)) {
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
                let (reply, ok) = run_tool(tool, &mut ctx);
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
                fast.note(*index, started.elapsed());
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
    fn flushes(tool: &Tool, hooks: &[HookEntry], fast: &QuickHooks) -> Vec<Flush> {
        let hook = |event: &str, index| Step::Hook {
            event: event.into(),
            index,
        };
        let steps = [
            hook("pre_tool_call", 0),
            Step::Tool,
            hook("post_tool_call", 1),
            hook("transform_tool_result", 2),
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
    fn only_answers_of_hooks_wait_and_only_for_hooks_quick_last_time() {
        let quick = Arc::new(AtomicU64::new(0));
        let last_hook = Arc::new(AtomicU64::new(0));
        let tool = Tool::new(spec("t"), Arc::new(Sleepy(quick.clone())));
        let hooks = [hook(&quick), hook(&quick), hook(&last_hook)];
        let fast = QuickHooks::default();
        use Flush::{Hold, Now};
        // Never run: every answer is written before the next step runs.
        assert_eq!(flushes(&tool, &hooks, &fast), [Now; 4]);
        // All quick last time: the post hook's answer waits for the
        // transform hook's; the pre hook's and the tool's never wait.
        assert_eq!(flushes(&tool, &hooks, &fast), [Now, Now, Hold, Now]);
        // The last hook is slow this time: the answer before it waited
        // (it was quick before); the next call writes it first.
        last_hook.store(5, Ordering::SeqCst);
        assert_eq!(flushes(&tool, &hooks, &fast), [Now, Now, Hold, Now]);
        assert_eq!(flushes(&tool, &hooks, &fast), [Now; 4]);
        // Quick again: held again.
        last_hook.store(0, Ordering::SeqCst);
        assert_eq!(flushes(&tool, &hooks, &fast), [Now; 4]);
        assert_eq!(flushes(&tool, &hooks, &fast), [Now, Now, Hold, Now]);
    }
}
