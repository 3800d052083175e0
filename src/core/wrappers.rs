//! Wrapper lanes: a before/after pair around what a point does, registered
//! once, whose state between its two halves is its own (pluggy's
//! `hookwrapper`). A timer, a span, a lock or a budget around every tool
//! handler needs the `before` half's value in the `after` half; as two
//! plain callbacks it would have to keep it in shared state keyed by call.
//!
//! The one wrapper lane of the core is [`TOOL_HANDLER`], around a tool's
//! handler (P9x to the result): the `before` halves run in (priority,
//! registration) order, the `after` halves in reverse, so wrappers nest.
//! A half that fails is logged and counted on the wrapper's
//! [`HookStats`]; the call goes on (wrappers fail open), and a wrapper
//! whose `before` failed gets no `after`.

use std::any::Any;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::core::callbacks::{HookError, HookStats};
use crate::core::outcome::ToolOutcome;
use crate::core::points::{Lane, LaneForm, Point};

/// Around every tool handler: from just before it runs (after P9x) to its result.
pub static TOOL_HANDLER: Lane = Lane::wrapping(
    &TOOL_HANDLER,
    "tool_handler",
    Point::ToolAround,
    0,
    LaneForm::Wrapper,
    "Around every tool handler: the first half just before it runs, the second with its result.",
);

/// The call a wrapper is around.
#[derive(Debug)]
pub struct Wrapped<'a> {
    pub session_id: &'a str,
    pub tool: &'a str,
    pub tool_call_id: &'a str,
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
}

/// What the wrapped handler did, for the `after` half.
#[derive(Debug)]
pub struct Unwrapped<'a> {
    /// The result text as the handler (or its renderer) made it.
    pub text: &'a str,
    pub outcome: &'a ToolOutcome,
    pub duration_ms: f64,
}

/// A wrapper's own state between its halves.
pub type WrapState = Box<dyn Any + Send>;

/// A before/after pair; see the module doc.
pub trait Wrapper: Send + Sync + 'static {
    /// Before the handler; the value is handed to this wrapper's `after`.
    fn before(&self, call: &Wrapped<'_>) -> Result<WrapState, HookError>;
    /// After the handler, with its own state.
    fn after(
        &self,
        state: WrapState,
        call: &Wrapped<'_>,
        result: &Unwrapped<'_>,
    ) -> Result<(), HookError>;
}

/// One wrapper subscription.
#[derive(Clone)]
pub struct WrapEntry {
    pub owner: String,
    pub label: String,
    /// Lower wraps outside (its `before` first, its `after` last).
    pub priority: i32,
    pub wrapper: Arc<dyn Wrapper>,
    pub stats: Arc<HookStats>,
}

impl fmt::Debug for WrapEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WrapEntry")
            .field("owner", &self.owner)
            .field("label", &self.label)
            .field("priority", &self.priority)
            .finish()
    }
}

/// The wrappers entered around one call, in entering order, each with its state.
pub struct Entered<'e> {
    open: Vec<(&'e WrapEntry, WrapState)>,
}

fn failed(entry: &WrapEntry, half: &str, error: &HookError) {
    if entry.stats.count(error) {
        tracing::warn!(
            "wrapper {} of {} failed in its {half} half: {error}",
            entry.label,
            entry.owner
        );
    } else {
        tracing::debug!(
            "wrapper {} of {} failed in its {half} half: {error}",
            entry.label,
            entry.owner
        );
    }
}

/// Run the `before` halves of `entries`, in order.
pub fn enter<'e>(entries: &'e [WrapEntry], call: &Wrapped<'_>) -> Entered<'e> {
    let mut open = Vec::with_capacity(entries.len());
    for entry in entries {
        entry.stats.calls.fetch_add(1, Ordering::Relaxed);
        match entry.wrapper.before(call) {
            Ok(state) => open.push((entry, state)),
            Err(error) => failed(entry, "before", &error),
        }
    }
    Entered { open }
}

impl Entered<'_> {
    /// Run the `after` halves, innermost first.
    pub fn exit(self, call: &Wrapped<'_>, result: &Unwrapped<'_>) {
        for (entry, state) in self.open.into_iter().rev() {
            if let Err(error) = entry.wrapper.after(state, call, result) {
                failed(entry, "after", &error);
            }
        }
    }
}
