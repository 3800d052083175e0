//! What an isolated plugin's hooks share with the host across a turn and
//! a session: the number its worker knows a turn by (the worker drops its
//! state of the turn when the turn ends), and the copies of a dialect's
//! per-session state that cross to the worker and back.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::core::hooks::{Slots, TurnScope};
use crate::isolation::supervisor::Supervisor;

/// The number an isolated plugin's worker knows a turn by, kept in the
/// turn's scope; when the turn ends (its scope is dropped) every worker
/// that served it drops its state of the turn.
pub(super) struct IsolatedTurn {
    pub(super) number: u64,
    workers: Mutex<Vec<TurnWorker>>,
}

/// A worker serving a turn.
struct TurnWorker {
    sup: Supervisor,
    /// The crash count of the worker process that was handed the
    /// session's state this turn (a process started since is handed it
    /// again).
    handed: Option<u64>,
    /// The session's state it last reported this turn: what a process
    /// started after a crash goes on from.
    reported: Option<Value>,
}

impl IsolatedTurn {
    /// The turn of `scope`, noting that `sup` serves it.
    pub(super) fn of(scope: &TurnScope, sup: &Supervisor) -> Option<Arc<IsolatedTurn>> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let turn = scope.slot("isolation", || IsolatedTurn {
            number: NEXT.fetch_add(1, Ordering::Relaxed),
            workers: Mutex::default(),
        })?;
        let mut workers = turn.workers.lock().unwrap_or_else(|e| e.into_inner());
        if !workers.iter().any(|w| w.sup.same(sup)) {
            workers.push(TurnWorker {
                sup: sup.clone(),
                handed: None,
                reported: None,
            });
        }
        drop(workers);
        Some(turn)
    }

    /// The session's state to hand `sup`'s worker with this request: once
    /// per turn and worker process, as soon as the turn owns its session
    /// (before, there is nothing read to hand over). The state as the turn
    /// started, not as it is now: the worker counts this turn's calls
    /// itself, as in-process plugins do on their own copy, and a value
    /// with some of them counted would count them twice.
    pub(super) fn handover(&self, sup: &Supervisor, states: &SessionStates) -> Option<Value> {
        let baseline = states.baseline(sup.dialect())?;
        let crashes = sup.status().crashes;
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let worker = workers.iter_mut().find(|w| w.sup.same(sup))?;
        if worker.handed == Some(crashes) {
            return None;
        }
        worker.handed = Some(crashes);
        Some(worker.reported.clone().unwrap_or(baseline))
    }

    pub(super) fn reported(&self, sup: &Supervisor, value: &Value) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(worker) = workers.iter_mut().find(|w| w.sup.same(sup)) {
            worker.reported = Some(value.clone());
        }
    }
}

impl Drop for IsolatedTurn {
    fn drop(&mut self) {
        let workers = self.workers.get_mut().unwrap_or_else(|e| e.into_inner());
        for worker in workers.drain(..) {
            worker.sup.forget_turn(self.number);
        }
    }
}

/// The isolated plugins' share of a session's per-session state on the
/// host, kept in the session's slots: the dialects' state as the current
/// turn started (what each worker serving the turn is handed), and what
/// the workers reported since (stored with the session at the turn's end,
/// as an in-process plugin's state is). The state itself stays in the
/// worker, so a plugin reads its own writes; only copies cross.
#[derive(Default)]
pub struct SessionStates {
    inner: Mutex<StatesInner>,
}

#[derive(Default)]
struct StatesInner {
    /// By dialect; `None` until a turn of the session started.
    baseline: Option<Map<String, Value>>,
    /// By dialect: the latest value a worker reported this turn.
    reported: Map<String, Value>,
}

impl SessionStates {
    pub(super) fn of(slots: &Slots) -> Option<Arc<SessionStates>> {
        slots.slot("isolated-session-state", SessionStates::default)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StatesInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn owns the session and has read what is stored into `slots`:
    /// the dialects' state now is what the turn's workers are handed.
    pub fn turn_begins(slots: &Slots) {
        let Some(states) = SessionStates::of(slots) else {
            return;
        };
        let baseline = crate::dialects::DIALECTS
            .iter()
            .filter_map(|d| {
                Some((
                    d.name().to_string(),
                    (d.abilities().session_state?.export)(slots)?,
                ))
            })
            .collect();
        states.lock().baseline = Some(baseline);
    }

    /// Put what the workers reported into `slots` (each dialect imports
    /// its own), where the session store exports the state from. Done at
    /// the turn's end, not on each report: an in-process plugin of the
    /// same dialect counts the turn's calls in the slots meanwhile, and
    /// a report put in between would have it count a call twice.
    pub fn settle(slots: &Slots) {
        let Some(states) = SessionStates::of(slots) else {
            return;
        };
        let reported = std::mem::take(&mut states.lock().reported);
        for (name, value) in reported {
            if let Some(state) =
                crate::dialects::by_name(&name).and_then(|d| d.abilities().session_state)
            {
                (state.import)(slots, &value);
            }
        }
    }

    /// The state of `dialect` as the turn started (`{}`: none); `None`
    /// before a turn started.
    fn baseline(&self, dialect: &str) -> Option<Value> {
        let inner = self.lock();
        let baseline = inner.baseline.as_ref()?;
        Some(
            baseline
                .get(dialect)
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
        )
    }

    pub(super) fn report(&self, dialect: &str, value: Value) {
        self.lock().reported.insert(dialect.to_string(), value);
    }
}
