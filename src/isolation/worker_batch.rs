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
//! Each step's answer is written as soon as it is known. Holding answers
//! back to write a call's in one go was measured (issue 26, item 5) and
//! saved nothing on this path: the reader's wake-ups were not what the
//! hooks cost; and it made a worker that dies in a later step lose answers
//! given before.

use std::time::Instant;

use super::protocol::{event_named, ActionWire, Reply, Step, ToolCallWire};
use super::worker_calls::Token;
use crate::core::hooks::{HookAction, HookEntry, HookError, HookEvent, HookPayload, HookReturn};
use crate::core::points::BoxFuture;
use crate::core::registry::{Tool, ToolReturn};

/// Run `steps` of a call of `tool` (`None`: not in this worker) with the
/// plugin's `hooks`; `send(reply, last)` answers each step. Cancelled
/// (`token`), it runs no further step, and an async step's task is
/// cancelled.
pub(super) fn run(
    tool: Option<&Tool>,
    hooks: &[HookEntry],
    call: ToolCallWire,
    steps: &[Step],
    token: Option<&Token>,
    send: &mut dyn FnMut(Reply, bool),
) {
    let Some(tool) = tool else {
        return send(refused("no such tool in this worker".into()), true);
    };
    let mut ctx = call.into_context(None);
    // The result the post-call hooks are shown: the tool's, as plughost
    // keeps it (an isolated hook's answer never edits it in place).
    let mut text = String::new();
    // A `pre_tool_call` hook answered something other than "continue".
    let mut pre_refused = false;
    for (at, step) in steps.iter().enumerate() {
        if token.is_some_and(Token::is_cancelled) {
            return;
        }
        let next_is = |event: HookEvent| matches!(steps.get(at + 1), Some(Step::Hook { event: e, .. }) if event_named(e) == Some(event));
        let done = at + 1 == steps.len();
        match step {
            Step::Tool => {
                let (reply, ok) = run_tool(tool, &mut ctx, token);
                if let Ok(result) = &ok {
                    text = result.clone();
                }
                let stop = done || ok.is_err();
                send(reply, stop);
                if stop {
                    return;
                }
                ctx.success = Some(true);
            }
            Step::Hook { event, index } => {
                let (Some(event), Some(entry)) = (event_named(event), hooks.get(*index)) else {
                    return send(refused(format!("no hook {event} number {index}")), true);
                };
                if event != HookEvent::ToolGuard {
                    ctx.result = Some(text.clone());
                }
                ctx.stage = Some(event);
                let answer = match entry.callback.call(event, HookPayload::Tool(&mut ctx)) {
                    HookReturn::Ready(answer) => answer,
                    HookReturn::Pending(fut) => wait(fut, token).unwrap_or_else(Err),
                };
                let pre = event == HookEvent::ToolGuard;
                pre_refused |= pre && !matches!(answer, Ok(HookAction::Continue));
                let reply = Reply::Hook {
                    answer: answer.map(ActionWire::from).map_err(Into::into),
                    params: super::worker_plugin::params_edit(&mut ctx),
                    after: None,
                };
                // After the last `pre_tool_call` hook: stop unless all went on.
                let stop = done || (pre && pre_refused && !next_is(HookEvent::ToolGuard));
                send(reply, stop);
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
    token: Option<&Token>,
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
        ToolReturn::Pending(fut) => wait(fut, token).unwrap_or_else(|e| Err(plugin_error(e))),
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
fn wait<T: Send + 'static>(fut: BoxFuture<T>, token: Option<&Token>) -> Result<T, HookError> {
    let Some(rt) = crate::runtime::Runtime::get() else {
        return Err(HookError::NotRun(
            "the worker's runtime is not running".into(),
        ));
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = rt.tokio().spawn(async move {
        let _ = tx.send(fut.await);
    });
    if let Some(token) = token {
        // Cancelled, the task is aborted: its future (and the Python task
        // under it) is dropped, and `recv` below sees the sender gone.
        token.set_task(task.abort_handle());
    }
    rx.recv()
        .map_err(|_| HookError::NotRun("the handler's future was dropped".into()))
}
