//! A dialect's part of `plugins doctor`: where its modules come from, its
//! own section, and what its plugins registered (providers, what this host
//! does not use).

use std::path::Path;

use super::super::DIALECTS;
use super::DependencyState;
use crate::core::extensions::Extensions;

/// A dialect with something of its own to show in `plugins doctor`.
pub trait Doctor: Send + Sync {
    /// Where the dialect's modules come from, once loaded.
    fn origin(&self) -> Option<String> {
        None
    }
    /// The place of its `<name> modules: <origin>` line among the
    /// interpreter's lines of `plugins doctor` (lowest first); `None` when
    /// doctor does not show where its modules come from (the default).
    fn modules_rank(&self) -> Option<u8> {
        None
    }
    /// Its own section of `plugins doctor` for the host at `home` whose
    /// plugins are `plugins` (Flowly's view of the web providers); `None`
    /// when it has none (the default).
    fn section(&self, home: &Path, plugins: &[DoctorPlugin<'_>]) -> Option<DoctorSection> {
        let _ = (home, plugins);
        None
    }
    /// Whether `plugins doctor` lists its loaded plugins in the order they
    /// loaded (it orders them itself, [`super::LoadOrder`]). Default: no.
    fn shows_load_order(&self) -> bool {
        false
    }
}

/// A dialect whose plugins register things `plugins doctor` reports on.
pub trait Providers: Send + Sync {
    /// The providers its plugin `key` registered on the host whose state is
    /// `state`, each with whether it is active.
    fn providers(&self, state: &Extensions, key: &str) -> Vec<String>;
    /// What its plugin `key` registered that this host does not use, as
    /// kept in the host's `state`. None by default.
    fn not_used(&self, state: &Extensions, key: &str) -> Vec<String> {
        let _ = (state, key);
        Vec::new()
    }
}

/// A plugin as a dialect's [`Doctor::section`] sees it (the host's
/// record of it; the dialect layer does not know the host's types).
pub struct DoctorPlugin<'a> {
    pub key: &'a str,
    pub loaded: bool,
    /// Its status (`Failed` also for a skipped plugin).
    pub state: DependencyState,
    /// Its status as `plugins list` shows it (`failed`, `skipped`, …).
    pub status_text: &'static str,
    /// The web providers its manifest declares.
    pub provides_web_providers: &'a [String],
}

/// One dialect's section of `plugins doctor`: its key in the JSON report
/// and value there, and its lines in the text (`None`: no lines at all).
pub struct DoctorSection {
    pub key: &'static str,
    pub json: serde_json::Value,
    pub lines: Option<Vec<String>>,
}

/// Every dialect's section of `plugins doctor`, in table order.
pub fn doctor_sections(home: &Path, plugins: &[DoctorPlugin<'_>]) -> Vec<DoctorSection> {
    DIALECTS
        .iter()
        .filter_map(|d| d.abilities().doctor?.section(home, plugins))
        .collect()
}

/// `(name, origin)` of every dialect whose modules `plugins doctor` shows,
/// in its order (`not loaded` when the dialect's modules are not loaded).
pub fn doctor_modules() -> Vec<(&'static str, String)> {
    let mut ranked: Vec<(u8, &'static str, String)> = DIALECTS
        .iter()
        .filter_map(|d| {
            let doctor = d.abilities().doctor?;
            let rank = doctor.modules_rank()?;
            Some((
                rank,
                d.name(),
                doctor.origin().unwrap_or_else(|| "not loaded".into()),
            ))
        })
        .collect();
    ranked.sort_by_key(|(rank, _, _)| *rank);
    ranked.into_iter().map(|(_, n, o)| (n, o)).collect()
}

/// What plugin `key` registered that this host does not use, by every dialect.
pub fn not_used(state: &Extensions, key: &str) -> Vec<String> {
    DIALECTS
        .iter()
        .filter_map(|d| d.abilities().providers)
        .flat_map(|p| p.not_used(state, key))
        .collect()
}

/// The providers plugin `key` registered, with their state, by every dialect.
pub fn providers(state: &Extensions, key: &str) -> Vec<String> {
    DIALECTS
        .iter()
        .filter_map(|d| d.abilities().providers)
        .flat_map(|p| p.providers(state, key))
        .collect()
}
