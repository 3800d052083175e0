//! Reload without restart: a host's plugins as one immutable
//! [`PluginSet`] behind an atomic pointer, and a reload that discovers
//! again and swaps in a new set.
//!
//! Why a set, and why each call pins one: a call (a tool call, a hook
//! firing, a command) takes the set in force when it starts and holds it
//! until it ends, so a reload never pulls a plugin out from under a call
//! that is running its code; the old set goes away when its last call
//! finishes, and only then are the plugins it alone held unloaded (Hermes
//! `on_unload` and `spawn_task` teardown, Felix's shutdown, isolated
//! workers stopped).
//!
//! A reload loads new and changed plugins first (a plugin is "changed"
//! when the files under its directory changed, or where it runs did) and
//! keeps the [`Unit`] of every unchanged one, so their Python state stays
//! as it is. A plugin whose new version fails to load keeps its old
//! version in the new set, and the failure is in the [`ReloadReport`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::{Map, Value};

use super::load::{apply_registrations, load_candidate, note_collision, RuntimeToolSource};
use super::{PluginRecord, ToolCollision};
use crate::core::extensions::Extensions;
use crate::core::hooks::{HookEntry, HookEvent};
use crate::core::registry::{Command, Registration, Registry, Tool};
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::Candidate;

/// One plugin as it was loaded: its contributions, the Python package or
/// worker they live in, and what it was loaded from. Shared by every set
/// that includes it; dropped (unloaded) with the last.
pub struct Unit {
    key: String,
    dir: PathBuf,
    stamp: u64,
    isolated: bool,
    /// Its record as loaded, contributions not yet noted.
    record: PluginRecord,
    loaded_at: SystemTime,
    /// Before the package and the worker: handlers refer into them.
    registrations: Vec<Registration>,
    worker: Option<crate::isolation::Supervisor>,
    _package: Vec<Box<dyn Send + Sync>>,
}

/// What the host keeps across reloads that discovery does not give: the
/// builder's native tools, commands and hooks, the MCP servers' tools, and
/// the direct registrations (the wheel's), re-applied to every set.
#[derive(Default)]
pub(super) struct Fixed {
    pub tools: Vec<Tool>,
    pub commands: Vec<Command>,
    pub hooks: Vec<(HookEvent, HookEntry)>,
    /// Owner and contributions applied after the plugins (MCP tools, then
    /// the direct registrations), so they win a collision as at build.
    pub after: Vec<(String, Vec<Registration>)>,
    pub hook_timeout: Option<std::time::Duration>,
    pub collision: Option<crate::core::registry::CollisionPolicy>,
}

/// The plugins a host runs at one moment, and the registry built of them.
pub struct PluginSet {
    pub(super) registry: Registry,
    pub(super) plugins: Vec<PluginRecord>,
    pub(super) collisions: Vec<ToolCollision>,
    pub(super) lists: PluginLists,
    pub(super) units: Vec<Arc<Unit>>,
    /// `config.json` as this set read it (to tell a reload's changed sections).
    pub(super) config: Value,
    /// Why the new version of a plugin kept at its old one failed, by key.
    pub(super) kept_old: Vec<(String, String)>,
    /// 0 for the set the host was built with, then one more per reload.
    pub generation: u64,
}

impl PluginSet {
    /// Apply contributions known only once this set's plugins have loaded
    /// (the MCP servers a bundle declares), as [`assemble`] applies
    /// [`Fixed::after`].
    pub(super) fn apply_after(
        &mut self,
        after: &[(String, Vec<Registration>)],
    ) -> Result<(), super::HostError> {
        for (owner, registrations) in after {
            let mut record = PluginRecord::direct(owner);
            let copies = registrations.iter().map(copy).collect();
            apply_registrations(
                copies,
                owner,
                &mut record,
                &mut self.registry,
                &mut self.collisions,
            );
        }
        match self.registry.refused().first() {
            Some(refused) => Err(super::HostError::Collision(refused.clone())),
            None => Ok(()),
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
    pub fn plugins(&self) -> &[PluginRecord] {
        &self.plugins
    }
    fn unit(&self, key: &str) -> Option<&Arc<Unit>> {
        self.units.iter().find(|u| u.key == key)
    }
    pub(super) fn worker_status(&self, key: &str) -> Option<crate::isolation::WorkerStatus> {
        self.unit(key)?.worker.as_ref().map(|w| w.status())
    }
    /// Each loaded plugin's version and when it was loaded (`plugins
    /// doctor` against a running server, `GET /admin/plugins`).
    pub fn versions(&self) -> Vec<LoadedVersion> {
        self.units
            .iter()
            .map(|u| LoadedVersion {
                key: u.key.clone(),
                version: u.record.version.clone(),
                loaded_at: rfc3339(u.loaded_at),
                isolated: u.isolated,
                new_version_failed: self
                    .kept_old
                    .iter()
                    .find(|(k, _)| *k == u.key)
                    .map(|(_, e)| e.clone()),
            })
            .collect()
    }
}

/// A loaded plugin's version, as a running server reports it.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct LoadedVersion {
    pub key: String,
    pub version: String,
    /// UTC, RFC 3339.
    pub loaded_at: String,
    pub isolated: bool,
    /// Set when the plugin's files changed but the new version failed to
    /// load, so this (older) version still runs: why it failed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub new_version_failed: Option<String>,
}

/// What a reload changed (`POST /admin/reload` answers it).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ReloadReport {
    /// The set's generation after the reload.
    pub generation: u64,
    /// Plugins loaded that the previous set did not have.
    pub added: Vec<String>,
    /// Plugins whose new version replaced the old one.
    pub changed: Vec<String>,
    /// Plugins unloaded (gone, disabled or no longer enabled).
    pub removed: Vec<String>,
    /// Plugins whose new version failed: the old one keeps running.
    pub failed: Vec<FailedReload>,
    /// New plugins that failed to load (there is no old version to keep).
    pub not_loaded: Vec<FailedReload>,
    /// Top-level sections of `config.json` that changed.
    pub config_sections: Vec<String>,
}

impl ReloadReport {
    /// One line per kind of change, for `/reload-plugins` and the CLI.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return format!(
                "Plugins reloaded (generation {}): nothing changed.",
                self.generation
            );
        }
        let mut lines = vec![format!(
            "Plugins reloaded (generation {}):",
            self.generation
        )];
        for (what, keys) in [
            ("added", &self.added),
            ("changed", &self.changed),
            ("removed", &self.removed),
            ("config sections changed", &self.config_sections),
        ] {
            if !keys.is_empty() {
                lines.push(format!("  {what}: {}", keys.join(", ")));
            }
        }
        for f in &self.failed {
            lines.push(format!(
                "  kept at the old version (the new one failed): {}: {}",
                f.key, f.error
            ));
        }
        for f in &self.not_loaded {
            lines.push(format!("  not loaded: {}: {}", f.key, f.error));
        }
        lines.join("\n")
    }

    /// Whether anything changed at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && self.failed.is_empty()
            && self.not_loaded.is_empty()
            && self.config_sections.is_empty()
    }
}

/// One plugin that did not load in a reload, and why.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FailedReload {
    pub key: String,
    pub error: String,
}

/// What loading a set needs besides the candidates.
pub(super) struct Inputs<'a> {
    pub home: &'a Path,
    pub extensions: &'a Arc<Extensions>,
    pub python: &'a Result<(), String>,
    pub guard: &'a super::load::CallGuard,
    pub isolation: &'a crate::plugins::config::Isolation,
    pub settings: &'a Result<crate::isolation::Settings, String>,
    pub limits: &'a crate::plugins::config::LimitTable,
    pub fixed: &'a Fixed,
    pub lists: PluginLists,
}

/// One candidate's place in a set being assembled.
enum Entry {
    Loaded(Arc<Unit>),
    NotLoaded(Box<PluginRecord>),
}

/// Load `candidates` into a new set, reusing `previous`'s unit of every
/// unchanged plugin and keeping its old unit when a new version fails.
pub(super) fn assemble(
    candidates: Vec<Candidate>,
    inputs: Inputs<'_>,
    previous: Option<&PluginSet>,
) -> Result<(PluginSet, ReloadReport), super::HostError> {
    let mut report = ReloadReport::default();
    let mut entries: Vec<Entry> = Vec::new();
    let mut kept_old = Vec::new();
    let order = crate::dialects::load_order(candidates, &|key| inputs.isolation.covers(key));
    for c in order {
        let c = crate::dialects::check_dependencies(c, &|dep| {
            entries.iter().rev().find_map(|e| match e {
                Entry::Loaded(u) if u.key == dep => Some(crate::dialects::DependencyState::Loaded),
                Entry::NotLoaded(r) if r.key == dep => Some(r.dependency_state()),
                _ => None,
            })
        });
        let isolated = inputs.isolation.covers(&c.key);
        let stamp = stamp_of(&c.dir);
        let old = previous.and_then(|p| p.unit(&c.key)).cloned();
        let wanted = c.enabled && c.skip_reason.is_none();
        if let Some(u) = old
            .as_ref()
            .filter(|u| wanted && u.dir == c.dir && u.stamp == stamp && u.isolated == isolated)
        {
            entries.push(Entry::Loaded(u.clone()));
            continue;
        }
        let key = c.key.clone();
        match load_one(c, &inputs, isolated, stamp) {
            Ok(unit) => {
                match &old {
                    Some(_) => report.changed.push(key),
                    None if previous.is_some() => report.added.push(key),
                    None => {}
                }
                entries.push(Entry::Loaded(Arc::new(unit)));
            }
            Err(record) => match old {
                Some(u) if wanted => {
                    let error = record.error.clone().unwrap_or_default();
                    tracing::warn!("plugin '{key}': its new version failed to load, so its old version keeps running: {error}");
                    report.failed.push(FailedReload {
                        key: key.clone(),
                        error: error.clone(),
                    });
                    kept_old.push((key, error));
                    entries.push(Entry::Loaded(u));
                }
                _ => {
                    if previous.is_some() && wanted {
                        report.not_loaded.push(FailedReload {
                            key: key.clone(),
                            error: record.error.clone().unwrap_or_default(),
                        });
                    }
                    entries.push(Entry::NotLoaded(record));
                }
            },
        }
    }
    if let Some(previous) = previous {
        for u in &previous.units {
            if !entries
                .iter()
                .any(|e| matches!(e, Entry::Loaded(n) if n.key == u.key))
            {
                report.removed.push(u.key.clone());
            }
        }
    }
    let set = registry_of(entries, &inputs, kept_old)?;
    report.generation = previous.map_or(0, |p| p.generation + 1);
    Ok((
        PluginSet {
            generation: report.generation,
            ..set
        },
        report,
    ))
}

/// Load one candidate on its own; `Err` is its record when it did not load.
fn load_one(
    c: Candidate,
    inputs: &Inputs<'_>,
    isolated: bool,
    stamp: u64,
) -> Result<Unit, Box<PluginRecord>> {
    let (key, dir) = (c.key.clone(), c.dir.clone());
    let isolate = isolated.then(|| (inputs.settings, inputs.limits.for_plugin(&c.key)));
    let (mut scratch, mut collisions, mut packages, mut workers, mut kept) = (
        Registry::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let record = load_candidate(
        c,
        (inputs.home, inputs.extensions, inputs.python, inputs.guard),
        isolate,
        &mut scratch,
        &mut collisions,
        &mut packages,
        &mut workers,
        &mut kept,
    );
    if !record.loaded {
        return Err(Box::new(record));
    }
    Ok(Unit {
        key,
        dir,
        stamp,
        isolated,
        record: bare(record),
        loaded_at: SystemTime::now(),
        registrations: kept,
        worker: workers.pop(),
        _package: packages,
    })
}

/// A record with its contribution lists emptied (they are noted again when
/// its registrations are applied to a set's registry).
fn bare(mut record: PluginRecord) -> PluginRecord {
    record.tools.clear();
    record.hooks.clear();
    record.commands.clear();
    record.skills.clear();
    record
}

/// The set's registry: the native parts, each loaded unit's contributions
/// in load order, then the MCP tools and the direct registrations.
fn registry_of(
    entries: Vec<Entry>,
    inputs: &Inputs<'_>,
    kept_old: Vec<(String, String)>,
) -> Result<PluginSet, super::HostError> {
    let fixed = inputs.fixed;
    let mut registry = Registry::new();
    registry.hook_timeout = fixed.hook_timeout;
    registry.collision = fixed.collision;
    let mut collisions = Vec::new();
    for tool in &fixed.tools {
        note_collision(
            &mut collisions,
            registry.add_tool(tool.clone()),
            crate::core::registry::NATIVE_OWNER,
        );
    }
    for command in &fixed.commands {
        registry.add_command(command.clone());
    }
    for (event, entry) in &fixed.hooks {
        registry.add_hook(*event, entry.clone());
    }
    let mut plugins = Vec::new();
    let mut units = Vec::new();
    for entry in entries {
        match entry {
            Entry::NotLoaded(record) => plugins.push(*record),
            Entry::Loaded(unit) => {
                let mut record = unit.record.clone();
                let copies = unit.registrations.iter().map(copy).collect();
                apply_registrations(
                    copies,
                    &unit.key,
                    &mut record,
                    &mut registry,
                    &mut collisions,
                );
                plugins.push(record);
                units.push(unit);
            }
        }
    }
    if let Some(source) = RuntimeToolSource::of(inputs.home, &plugins) {
        registry.set_runtime_tools(Arc::new(source));
    }
    for (owner, registrations) in &fixed.after {
        let mut record = PluginRecord::direct(owner);
        let copies = registrations.iter().map(copy).collect();
        apply_registrations(copies, owner, &mut record, &mut registry, &mut collisions);
    }
    if let Some(refused) = registry.refused().first() {
        return Err(super::HostError::Collision(refused.clone()));
    }
    Ok(PluginSet {
        registry,
        plugins,
        collisions,
        lists: inputs.lists.clone(),
        units,
        config: read_config(inputs.home),
        kept_old,
        generation: 0,
    })
}

/// A copy of a registration (each part is a handle: the copy calls the
/// same plugin code).
pub(super) fn copy(r: &Registration) -> Registration {
    match r {
        Registration::Tool(t) => Registration::Tool(t.clone()),
        Registration::Hook { event, name, entry } => Registration::Hook {
            event: *event,
            name: name.clone(),
            entry: entry.clone(),
        },
        Registration::Command(c) => Registration::Command(c.clone()),
        Registration::Skill(s) => Registration::Skill(s.clone()),
        Registration::Task(t) => Registration::Task(t.clone()),
        Registration::Observer(o) => Registration::Observer(o.clone()),
        Registration::Routes(r) => Registration::Routes(r.clone()),
        Registration::Authenticator(a) => Registration::Authenticator(a.clone()),
    }
}

/// What a plugin directory's files are now ([`crate::dialects::fresh::stamp_of`]).
pub(super) fn stamp_of(dir: &Path) -> u64 {
    crate::dialects::fresh::stamp_of(dir)
}

/// `config.json` of the home as JSON (an empty object when absent or broken).
pub(super) fn read_config(home: &Path) -> Value {
    std::fs::read_to_string(home.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()))
}

/// The top-level sections that differ between two configs.
pub(super) fn changed_sections(old: &Value, new: &Value) -> Vec<String> {
    let empty = Map::new();
    let (old, new) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

/// Fire [`Point::Reloaded`](crate::core::points::Point::Reloaded) on
/// `registry` with `{sections, config}` (Codumentor's `onConfigReload`).
pub(super) async fn fire_reloaded(registry: &Registry, sections: &[String], config: &Value) {
    use crate::core::hooks::{HookPayload, LoopContext};
    let mut params = Map::new();
    params.insert("sections".into(), serde_json::json!(sections));
    params.insert("config".into(), config.clone());
    let mut lc = LoopContext {
        params,
        ..Default::default()
    };
    for (lane, entries) in registry
        .hooks()
        .lanes_at(crate::core::points::Point::Reloaded)
    {
        lc.stage = Some(lane);
        crate::core::fire::fire_entries(
            entries,
            lane,
            HookPayload::Loop(&mut lc),
            registry.hook_timeout,
        )
        .await;
    }
}

/// `2026-12-01T19:41:10.123Z` (UTC, milliseconds): when a plugin loaded.
fn rfc3339(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_a_known_instant() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_764_618_070_123);
        assert_eq!(rfc3339(at), "2025-12-01T19:41:10.123Z");
    }

    #[test]
    fn changed_sections_are_the_differing_top_level_keys() {
        let old = serde_json::json!({"a": 1, "b": {"x": 1}, "c": 3});
        let new = serde_json::json!({"a": 1, "b": {"x": 2}, "d": 4});
        assert_eq!(changed_sections(&old, &new), ["b", "c", "d"]);
    }

    #[test]
    fn a_stamp_changes_with_a_file_and_not_with_pycache() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        let first = stamp_of(dir.path());
        std::fs::create_dir(dir.path().join("__pycache__")).unwrap();
        std::fs::write(dir.path().join("__pycache__/a.pyc"), "b").unwrap();
        assert_eq!(stamp_of(dir.path()), first);
        std::fs::write(dir.path().join("a.py"), "x = 22\n").unwrap();
        assert_ne!(stamp_of(dir.path()), first);
    }
}
