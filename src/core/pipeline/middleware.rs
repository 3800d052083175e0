//! Execution middleware: chains of callbacks *around* what a point does
//! (a tool's handler, the provider call), each getting a `next` that runs
//! the rest of the chain. A dialect brings such a lane as a row of form
//! [`LaneForm::Around`] (Hermes's
//! middleware, `hermes_cli/middleware.py`);
//! [`run_chain`] walks it: a middleware that fails without calling `next`
//! is skipped (the next one runs); one that fails after `next` succeeded
//! keeps `next`'s result; an [`ExecError::Blocked`] always propagates;
//! `next` is single-use.
//!
//! A lane of policy [`Policy::Chain`]
//! at a point before a call ([`Point::ToolBefore`],
//! [`Point::ModelCallBefore`])
//! edits the call's request before the point's other lanes see it
//! ([`edits_request`]); it fires through [`crate::core::fire`] (budgets,
//! counters, fail-open).

use serde_json::Value;

use crate::core::bus::HookBus;
pub use crate::core::callbacks::{ExecCall, ExecError, Execution, Next};
use crate::core::hooks::{HookCallback, HookEntry, HookEvent, Lane, LaneForm, Point, Policy};

/// Whether lane `lane` edits a call's request before the other lanes of
/// its point: a chain lane (see the module doc).
pub fn edits_request(lane: &Lane) -> bool {
    lane.spec.policy == Policy::Chain && lane.form == LaneForm::Plain
}

/// Whether lane `lane` runs around what its point does ([`run_chain`]).
pub fn runs_around(lane: &Lane) -> bool {
    lane.form == LaneForm::Around
}

/// The first lane at `point` whose row `is`, with its subscriptions, when
/// it has any.
fn lane_where(
    hooks: &HookBus,
    point: Point,
    is: fn(&Lane) -> bool,
) -> Option<(&'static Lane, &[HookEntry])> {
    hooks
        .lanes_at(point)
        .find_map(|(lane, entries)| match lane {
            HookEvent::Lane(id) if is(id.lane()) => Some((id.lane(), entries)),
            _ => None,
        })
}

/// The request-editing lane at `point` ([`edits_request`]) with its
/// subscriptions, when it has any.
pub fn request_lane(hooks: &HookBus, point: Point) -> Option<(&'static Lane, &[HookEntry])> {
    lane_where(hooks, point, edits_request)
}

/// The lane around what `point` does ([`runs_around`]) with its
/// subscriptions, when it has any.
pub fn around_lane(hooks: &HookBus, point: Point) -> Option<(&'static Lane, &[HookEntry])> {
    lane_where(hooks, point, runs_around)
}

/// Run `entries`' execution middleware around `terminal` (see the module doc)
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
