//! Load order and dependencies: a dialect whose plugins load after the
//! plugins they name.

use std::path::Path;

use super::super::DIALECTS;
use crate::plugins::discovery::Candidate;

/// A dialect that orders its own plugins and knows what each depends on.
pub trait LoadOrder: Send + Sync {
    /// The load order of `candidates` as this dialect wants its own plugins
    /// ordered (the others keep their places); `isolated(key)` says whether
    /// a plugin runs in a worker.
    fn order(&self, candidates: Vec<Candidate>, isolated: &dyn Fn(&str) -> bool) -> Vec<Candidate>;

    /// Keep its candidate `c` out when a plugin it depends on did not load
    /// (`state_of(key)`: what became of the plugin `key` handled before it).
    /// By default `c` is returned as it is.
    fn check_dependencies(
        &self,
        c: Candidate,
        state_of: &dyn Fn(&str) -> Option<DependencyState>,
    ) -> Candidate {
        let _ = state_of;
        c
    }

    /// The plugins `key` loads after, for `plugins list`. None by default.
    fn dependencies(&self, key: &str, dir: &Path) -> Vec<String> {
        let _ = (key, dir);
        Vec::new()
    }
}

/// What became of a plugin handled before a dependent one (the host's
/// record of it, as far as a dependency check or a doctor section needs it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyState {
    Loaded,
    /// Disabled in config.
    Disabled,
    /// Not in the enabled list.
    NotEnabled,
    /// Failed (or was skipped), with its error when it has one.
    Failed(Option<String>),
}

/// `candidates` in load order: each dialect orders its own, in table order.
pub fn load_order(candidates: Vec<Candidate>, isolated: &dyn Fn(&str) -> bool) -> Vec<Candidate> {
    DIALECTS
        .iter()
        .fold(candidates, |c, d| match d.abilities().load_order {
            Some(order) => order.order(c, isolated),
            None => c,
        })
}

/// `c`, kept out when its dialect says a dependency of it did not load.
pub fn check_dependencies(
    c: Candidate,
    state_of: &dyn Fn(&str) -> Option<DependencyState>,
) -> Candidate {
    DIALECTS
        .iter()
        .fold(c, |c, d| match d.abilities().load_order {
            Some(order) => order.check_dependencies(c, state_of),
            None => c,
        })
}
