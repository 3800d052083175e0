//! What a dialect's hooks need when its plugin runs in an isolated worker:
//! their per-turn and per-session state carried to the worker and back.
//! (How a failed callback counts is its event row's, the same in-process
//! and isolated: [`crate::core::hooks::EventRow`].)

use crate::core::hooks::{LoopContext, Slots};

/// A dialect whose hooks need more than their arguments to run in a worker.
pub trait Isolated: Send + Sync {
    /// Its per-turn state on a loop point's context that an isolated
    /// plugin's hook carries to its worker and back, as an opaque value
    /// (`None` inside when there is none yet), with where the worker's
    /// version goes back to; `None` when nothing crosses (the default).
    fn carry_out(&self, lc: &mut LoopContext) -> Option<Carried> {
        let _ = lc;
        None
    }
    /// In plughost, before a confined worker of its plugins starts: trees
    /// the worker must read that plughost prepares first, for the home
    /// `home` (Hermes's `hermes` stand-in command, which a confined worker
    /// may not write). None by default.
    fn worker_reads(&self, home: &std::path::Path) -> Vec<std::path::PathBuf> {
        let _ = home;
        Vec::new()
    }
    /// In a worker: put the state [`Isolated::carry_out`] sent on the
    /// rebuilt context.
    fn carry_in(&self, lc: &mut LoopContext, state: serde_json::Value) {
        let _ = (lc, state);
    }
    /// In a worker: the state as the handler left it, for plughost.
    fn carry_left(&self, lc: &mut LoopContext) -> Option<serde_json::Value> {
        let _ = lc;
        None
    }
    /// In plughost, once plugin `key` at `dir` loaded in its worker: what
    /// the host itself keeps of it in `state` besides the worker's
    /// contributions (a bundle's MCP servers, which plughost starts
    /// confined as the worker is). Nothing by default.
    fn beside_worker(
        &self,
        key: &str,
        dir: &std::path::Path,
        home: &std::path::Path,
        state: &std::sync::Arc<crate::core::extensions::Extensions>,
    ) {
        let _ = (key, dir, home, state);
    }
}

/// A dialect's per-turn state on its way to an isolated worker: the value
/// sent, and where the value that comes back is stored.
pub struct Carried {
    pub state: Option<serde_json::Value>,
    pub back: Box<dyn Fn(serde_json::Value) + Send + Sync>,
}

/// How a dialect's per-session state leaves and re-enters a session's
/// slots: state that must outlive the process holding the session (a
/// replica that dies), exported from a session's slots as JSON (`None`:
/// nothing worth keeping) and imported back on the replica that resumes
/// it. `import` replaces the state in the slots with the value (`{}`: with
/// none); an isolated plugin's worker is handed its session's state that
/// way. A dialect without one keeps no such state.
#[derive(Clone, Copy)]
pub struct SessionState {
    pub export: fn(&Slots) -> Option<serde_json::Value>,
    pub import: fn(&Slots, &serde_json::Value),
}
