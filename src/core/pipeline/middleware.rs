//! Middleware lanes (Hermes's `register_middleware`, `hermes_cli/middleware.py`):
//! unlike observer hooks, middleware changes what happens.
//!
//! - [`TOOL_REQUEST`] — a chain over a tool call's arguments, before every
//!   other lane of the call (`pre_tool_call` included) sees them; a
//!   callback edits [`LoopContext::tool_call`](crate::core::contexts::LoopContext::tool_call)'s arguments in place.
//! - [`LLM_REQUEST`] — a chain over a model call's request (model,
//!   messages, tools, parameters), after P7.
//! - [`TOOL_EXECUTION`], [`LLM_EXECUTION`] — chains *around* the handler
//!   and the provider call: each subscription's callback implements
//!   [`Execution`] ([`HookCallback::execution`]) and gets a `next` that
//!   runs the rest of the chain. [`run_chain`] has Hermes's semantics: a
//!   middleware that fails without calling `next` is skipped (the next one
//!   runs); one that fails after `next` succeeded keeps `next`'s result; a
//!   [`ExecError::Blocked`] always propagates; `next` is single-use.
//!
//! The lanes are rows of the event model like any dialect's; the request
//! lanes fire through [`crate::core::fire`] (budgets, counters, fail-open),
//! the execution lanes are walked by [`run_chain`].

use serde_json::Value;

pub use crate::core::callbacks::{ExecCall, ExecError, Execution, Next};
use crate::core::hooks::{HookCallback, HookEntry, Lane, LaneForm, Point, Policy};

/// A chain over a tool call's arguments, before `pre_tool_call`.
pub static TOOL_REQUEST: Lane = Lane::plain(
    &TOOL_REQUEST,
    "tool_request",
    Point::ToolBefore,
    0,
    Policy::Chain,
    "Before every other lane of a tool call: callbacks may replace its arguments (tool_request middleware).",
);

/// A chain over a model call's request, after P7.
pub static LLM_REQUEST: Lane = Lane::plain(
    &LLM_REQUEST,
    "llm_request",
    Point::ModelCallBefore,
    0,
    Policy::Chain,
    "Just before the provider call: callbacks may replace the request (llm_request middleware).",
);

/// Around a tool's handler, each callback calling the rest of the chain.
pub static TOOL_EXECUTION: Lane = Lane::wrapping(
    &TOOL_EXECUTION,
    "tool_execution",
    Point::ToolAround,
    0,
    LaneForm::Around,
    "Around a tool's handler: each callback runs the rest of the chain through next_call, or not (tool_execution middleware).",
);

/// Around the provider call, each callback calling the rest of the chain.
pub static LLM_EXECUTION: Lane = Lane::wrapping(
    &LLM_EXECUTION,
    "llm_execution",
    Point::ModelCallBefore,
    1,
    LaneForm::Around,
    "Around the provider call: each callback runs the rest of the chain through next_call, may raise LLMExecutionBlocked (llm_execution middleware).",
);

/// Run `entries`' execution middleware around `terminal`, Hermes's way
/// (see the module doc): how a lane of form [`LaneForm::Around`] fires.
/// Entries whose callback is not an [`Execution`] are passed over.
pub fn run_chain(
    entries: &[HookEntry],
    call: &ExecCall,
    payload: Value,
    terminal: &mut dyn FnMut(Value) -> Result<Value, ExecError>,
) -> Result<Value, ExecError> {
    let chain: Vec<(&HookEntry, &dyn Execution)> = entries
        .iter()
        .filter_map(|e| e.callback.execution().map(|x| (e, x)))
        .collect();
    call_at(&chain, 0, call, payload, terminal)
}

fn call_at(
    chain: &[(&HookEntry, &dyn Execution)],
    index: usize,
    call: &ExecCall,
    payload: Value,
    terminal: &mut dyn FnMut(Value) -> Result<Value, ExecError>,
) -> Result<Value, ExecError> {
    let Some((entry, middleware)) = chain.get(index) else {
        return terminal(payload);
    };
    entry
        .stats
        .calls
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut called = false;
    let mut succeeded: Option<Value> = None;
    let mut downstream = |next_payload: Value| -> Result<Value, ExecError> {
        if called {
            return Err(ExecError::Failed(format!(
                "Middleware '{}' callback {} called next_call() more than once; downstream execution is single-use",
                call.kind, entry.label
            )));
        }
        called = true;
        let r = call_at(chain, index + 1, call, next_payload, &mut *terminal);
        match r {
            Ok(v) => {
                succeeded = Some(v.clone());
                Ok(v)
            }
            Err(ExecError::Failed(e)) => Err(ExecError::Downstream(e)),
            Err(other) => Err(other),
        }
    };
    let outcome = middleware.run(call, payload.clone(), &mut downstream);
    match outcome {
        Ok(v) => Ok(v),
        Err(blocked @ ExecError::Blocked { .. }) => Err(blocked),
        Err(ExecError::Downstream(e)) => Err(ExecError::Downstream(e)),
        Err(ExecError::Failed(e)) => {
            entry
                .stats
                .errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                "Middleware '{}' callback {} of {} raised: {e}",
                call.kind,
                entry.label,
                entry.owner
            );
            if let Some(v) = succeeded {
                return Ok(v);
            }
            if called {
                return Err(ExecError::Failed(e));
            }
            call_at(chain, index + 1, call, payload, terminal)
        }
    }
}

/// Whether `callback` is an execution middleware (a helper for lanes that
/// list them).
pub fn is_execution(callback: &dyn HookCallback) -> bool {
    callback.execution().is_some()
}
