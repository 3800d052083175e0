//! Codumentor's per-session state, in a form the session store keeps
//! (`crate::agent::session`): the usage totals `onUsageTracked` reports as
//! `session_totals`. They are summed over the session's whole life, so a
//! session resumed on another replica (or after a restart) must go on from
//! the stored sum rather than from zero.

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::core::hooks::Slots;

/// Per session (in its session's slots, so it lives as long as the session
/// is loaded and belongs to its host): the usage of its calls, summed, and
/// the `(turn, iteration)` of the call counted last (a chain builds its
/// payload again when its first handler failed; the call is counted once).
/// Only the sum is stored: the last call belongs to this process's turn.
pub(super) struct Totals(pub(super) Mutex<(Map<String, Value>, (usize, usize))>);

impl Totals {
    pub(super) fn new() -> Totals {
        Totals(Mutex::new((Map::new(), (usize::MAX, usize::MAX))))
    }
}

fn totals(slots: &Slots) -> Option<Arc<Totals>> {
    slots.slot(super::DIALECT.as_str(), Totals::new)
}

/// `{"usage_totals": {...}}` once a call reported usage.
pub fn export(slots: &Slots) -> Option<Value> {
    let totals = totals(slots)?;
    let t = totals.0.lock().unwrap_or_else(|e| e.into_inner());
    (!t.0.is_empty()).then(|| json!({ "usage_totals": t.0 }))
}

/// The stored sum replaces this process's (it is the later one).
pub fn import(slots: &Slots, value: &Value) {
    let Some(sum) = value.get("usage_totals").and_then(Value::as_object) else {
        return;
    };
    if let Some(totals) = totals(slots) {
        totals.0.lock().unwrap_or_else(|e| e.into_inner()).0 = sum.clone();
    }
}
