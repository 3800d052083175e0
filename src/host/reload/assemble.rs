//! Assembling a plugin set: every candidate loaded, or its unit kept
//! from the previous set when unchanged (or when its new version fails).

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::report::{FailedReload, ReloadReport};
use super::{read_config, stamp_of, Fixed, PluginSet, Unit};
use crate::core::extensions::Extensions;
use crate::core::registry::{Registration, Registry};
use crate::host::load::{apply_registrations, load_candidate, note_collision, RuntimeToolSource};
use crate::host::PluginRecord;
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::Candidate;

/// What loading a set needs besides the candidates.
pub(in crate::host) struct Inputs<'a> {
    pub home: &'a Path,
    pub extensions: &'a Arc<Extensions>,
    pub python: &'a Result<(), String>,
    pub guard: &'a crate::host::load::CallGuard,
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
pub(in crate::host) fn assemble(
    candidates: Vec<Candidate>,
    inputs: Inputs<'_>,
    previous: Option<&PluginSet>,
) -> Result<(PluginSet, ReloadReport), crate::host::HostError> {
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
        let old = previous.and_then(|p| p.unit(&c.key)).cloned();
        let wanted = c.enabled && c.skip_reason.is_none();
        // Only a plugin that loads becomes a unit, which keeps its stamp.
        let stamp = if wanted { stamp_of(&c.dir) } else { 0 };
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
) -> Result<PluginSet, crate::host::HostError> {
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
        return Err(crate::host::HostError::Collision(refused.clone()));
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
pub(in crate::host) fn copy(r: &Registration) -> Registration {
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
        Registration::ModelProvider(p) => Registration::ModelProvider(p.clone()),
    }
}
