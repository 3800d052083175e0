//! Codumentor's per-session state, in a form the session store keeps
//! (`crate::agent::session`): the usage totals `onUsageTracked` reports as
//! `session_totals`. They are summed over the session's whole life, so a
//! session resumed on another replica (or after a restart) must go on from
//! the stored sum rather than from zero.

use std::sync::{Arc, Mutex, Weak};

use serde_json::{json, Map, Value};

use crate::core::hooks::{Slots, TurnScope};

/// Per session (in its session's slots, so it lives as long as the session
/// is loaded and belongs to its host): the usage of its calls, summed, and
/// the `(turn, iteration)` of the call counted last (a chain builds its
/// payload again when its first handler failed; the call is counted once).
/// Only the sum is stored: the last call belongs to this process's turn.
pub(super) struct Totals(pub(super) Mutex<(Map<String, Value>, Counted)>);

impl Totals {
    pub(super) fn new() -> Totals {
        Totals(Mutex::new((Map::new(), Counted::none())))
    }
}

/// The call counted last: its turn and iteration. The turn is held
/// weakly, not by address: a `Weak` keeps the scope's allocation, so a
/// later turn's scope can never be given the same address and be taken
/// for it (its first call would then go uncounted).
pub(super) struct Counted(Weak<TurnScope>, usize);

impl Counted {
    fn none() -> Counted {
        Counted(Weak::new(), usize::MAX)
    }

    pub(super) fn of(turn: &Arc<TurnScope>, iteration: usize) -> Counted {
        Counted(Arc::downgrade(turn), iteration)
    }

    pub(super) fn is(&self, turn: &Arc<TurnScope>, iteration: usize) -> bool {
        self.1 == iteration && std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(turn))
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

/// The value replaces this process's state (it is the later one): the
/// stored sum, or none for a value without one (an isolated plugin's
/// worker handed a session that has nothing stored, or was started over).
/// The call counted last is forgotten too: the value is what the next
/// call's usage adds to.
pub fn import(slots: &Slots, value: &Value) {
    let sum = value
        .get("usage_totals")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(totals) = totals(slots) {
        *totals.0.lock().unwrap_or_else(|e| e.into_inner()) = (sum, Counted::none());
    }
}
