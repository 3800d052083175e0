//! Hermes plugins shipped as installed distributions: the entry-point group
//! `hermes_agent.plugins` (Hermes's `ENTRY_POINTS_GROUP`), read from
//! `entry_points.txt` by [`crate::plugins::entry_points`] in the directories of the
//! interpreter plughost runs (an active virtualenv's site-packages
//! included, as the runtime adds it).
//!
//! As in Hermes, an entry point's manifest is synthesised from its name
//! (no `plugin.yaml` is read), its key is that name, enablement follows
//! `plugins.enabled`/`disabled`, and loading is `ep.load()`: the module
//! imported by its dotted name, then the attribute path after `:`. The
//! candidate's directory is the distribution's metadata directory, which
//! is how [`find`] recognises it at load time (in a worker process too).

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::discover::DIALECT;
use crate::core::outcome::PluginError;
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::{Candidate, Source};
use crate::plugins::entry_points::{self, EntryPoint};
use crate::plugins::manifest::{Manifest, PluginKind};
use crate::runtime::plugin_error;

/// Hermes's entry-point group.
pub const GROUP: &str = "hermes_agent.plugins";

/// Hermes's memory-provider entry-point group (`plugins/memory`'s
/// `ENTRY_POINTS_GROUP`): selected by `memory.provider`, not `plugins.enabled`.
pub const MEMORY_GROUP: &str = "hermes_agent.memory_providers";

/// Which group an entry point was found in: a general plugin's `register`
/// is called as is; a memory provider's object is turned into a provider
/// the way Hermes's `_load_provider_from_entry_point` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Plugins,
    MemoryProviders,
}

/// The directories the interpreter imports from: `sys.path` of the running
/// runtime, else what a freshly initialised interpreter would have plus an
/// active virtualenv's site-packages (what the runtime adds when it starts),
/// read without starting CPython when nothing started it yet
/// ([`crate::runtime::Runtime::search_path`]).
fn import_dirs() -> Vec<PathBuf> {
    match crate::runtime::interpreter_report() {
        Some(report) => report
            .path
            .into_iter()
            .map(|p| {
                if p.is_empty() {
                    std::env::current_dir().unwrap_or_default()
                } else {
                    PathBuf::from(p)
                }
            })
            .collect(),
        None => crate::runtime::Runtime::python().search_path().to_vec(),
    }
}

/// Every `hermes_agent.plugins` entry point installed, as candidates whose
/// enablement is decided against plughost's and Hermes's lists.
pub fn discover(lists: &PluginLists, yaml: &PluginLists) -> Vec<Candidate> {
    let scan = entry_points::scan(&import_dirs(), GROUP);
    for problem in &scan.problems {
        tracing::warn!("{problem}");
    }
    scan.entries
        .iter()
        .map(|ep| candidate(ep, lists, yaml))
        .collect()
}

fn candidate(ep: &EntryPoint, lists: &PluginLists, yaml: &PluginLists) -> Candidate {
    let key = ep.name.clone();
    let listed = |names: &[String]| names.contains(&key);
    let (enabled, skip_reason) = if listed(&lists.disabled) || listed(&yaml.disabled) {
        (false, Some(crate::plugins::format::Verdict::Disabled))
    } else if listed(&lists.enabled) || listed(&yaml.enabled) {
        (true, None)
    } else {
        (
            false,
            Some(crate::plugins::format::Verdict::NotEnabled(format!(
                "not enabled in config (add it to plugins.enabled of Hermes's config.yaml, or run: plughost plugins enable {key})"
            ))),
        )
    };
    build(ep, PluginKind::Standalone, enabled, skip_reason)
}

/// Every `hermes_agent.memory_providers` entry point whose name no other
/// candidate has taken (Hermes: directories win over entry points, and a
/// distribution whose general plugin of the same name registers the
/// provider is that plugin), enabled when `memory.provider` names it.
pub fn discover_memory(home: &Path, lists: &PluginLists, taken: &[Candidate]) -> Vec<Candidate> {
    use crate::plugins::format::Verdict;
    if std::env::var("HERMES_SAFE_MODE").is_ok_and(|v| crate::plugins::config::truthy(&v)) {
        return Vec::new();
    }
    let yaml = super::discover::read_config_lists(&super::discover::hermes_home());
    let active = super::memory::configured(home);
    let scan = entry_points::scan(&import_dirs(), MEMORY_GROUP);
    for problem in &scan.problems {
        tracing::warn!("{problem}");
    }
    let mut out: Vec<Candidate> = Vec::new();
    for ep in &scan.entries {
        // A memory directory is named by its folder (`plugins/memory/NAME`,
        // key `memory/NAME`) or its manifest: the same name wins here too,
        // so the entry point is never loaded (isolated, each would
        // otherwise register its provider in a worker of its own).
        let same_memory_dir = |c: &Candidate| {
            super::memory::is_memory_dir(&c.dir)
                && (c.dir.file_name().is_some_and(|n| *n == *ep.name)
                    || c.manifest.as_ref().is_ok_and(|m| m.name == ep.name))
        };
        if taken
            .iter()
            .chain(out.iter())
            .any(|c| c.key == ep.name || same_memory_dir(c))
        {
            continue;
        }
        let key = &ep.name;
        let (enabled, why) = if lists.disabled.contains(key) || yaml.disabled.contains(key) {
            (false, Some(Verdict::Disabled))
        } else if active.as_deref() == Some(key.as_str()) {
            (true, None)
        } else {
            let active_text = match &active {
                Some(a) => format!("the active one is '{a}'"),
                None => "none is selected".to_string(),
            };
            (false, Some(Verdict::NotEnabled(format!(
                "memory provider (entry point of {} {}); {active_text} (Hermes runs one at a time); select it with memory.provider: {key} in Hermes's config.yaml, or \"memory\": {{\"provider\": \"{key}\"}} in plughost's config.json",
                ep.distribution, ep.version
            ))))
        };
        out.push(build(ep, PluginKind::Exclusive, enabled, why));
    }
    out
}

fn build(
    ep: &EntryPoint,
    kind: PluginKind,
    enabled: bool,
    skip_reason: Option<crate::plugins::format::Verdict>,
) -> Candidate {
    let key = ep.name.clone();
    Candidate {
        key: key.clone(),
        source: Source::Entrypoint,
        dir: ep.metadata_dir.clone(),
        manifest: Ok(Manifest {
            name: key,
            version: ep.version.clone(),
            manifest_version: 1,
            description: format!(
                "entry point {} = {} of {} {}",
                ep.name, ep.value, ep.distribution, ep.version
            ),
            author: String::new(),
            kind,
            requires_env: Vec::new(),
            provides_tools: Vec::new(),
            provides_hooks: Vec::new(),
            provides_web_providers: Vec::new(),
            path: ep.metadata_dir.join("entry_points.txt"),
            warnings: Vec::new(),
            dialect: Default::default(),
        }),
        enabled,
        skip_reason,
        missing: false,
        dialect: DIALECT,
    }
}

/// The entry point `key` of the distribution whose metadata directory is
/// `dir`, and its group (`hermes_agent.plugins` first, as discovery lets a
/// general plugin take the name); `None` when `dir` is not a metadata
/// directory (a plugin directory).
pub fn find(dir: &Path, key: &str) -> Result<Option<(EntryPoint, Group)>, PluginError> {
    let is_metadata = dir
        .extension()
        .is_some_and(|x| x == "dist-info" || x == "egg-info");
    if !is_metadata {
        return Ok(None);
    }
    let location = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    for (group, name) in [
        (Group::Plugins, GROUP),
        (Group::MemoryProviders, MEMORY_GROUP),
    ] {
        let scan = entry_points::scan(std::slice::from_ref(&location), name);
        if let Some(ep) = scan
            .entries
            .into_iter()
            .find(|ep| ep.metadata_dir == dir && ep.name == key)
        {
            return Ok(Some((ep, group)));
        }
    }
    Err(PluginError::native(format!(
        "entry point '{key}' of group {GROUP} or {MEMORY_GROUP} is no longer in {} (the distribution was changed or removed); reinstall it",
        dir.join("entry_points.txt").display()
    )))
}

/// A memory-provider entry point's object as a `register(ctx)`: Hermes's
/// order (a provider instance, a subclass, a module with `register`, a
/// factory, a namespace holding a subclass), in the compat
/// `agent.memory_provider`.
pub fn memory_register_of<'py>(
    target: &Bound<'py, PyAny>,
    ep: &EntryPoint,
) -> Result<Bound<'py, PyAny>, PluginError> {
    let py = target.py();
    py.import("agent.memory_provider")
        .and_then(|m| m.getattr("_plughost_entry_point_register"))
        .and_then(|f| f.call1((target, &ep.name)))
        .map_err(|e| plugin_error(py, &e))
}

/// `ep.load()`: import the module, then follow the attribute path.
pub fn load<'py>(py: Python<'py>, ep: &EntryPoint) -> Result<Bound<'py, PyAny>, PluginError> {
    let mut target = py
        .import(ep.module())
        .map_err(|e| plugin_error(py, &e))?
        .into_any();
    if let Some(attrs) = ep.attr() {
        for attr in attrs.split('.') {
            target = target.getattr(attr).map_err(|e| plugin_error(py, &e))?;
        }
    }
    Ok(target)
}

/// The loaded object's `register`, as Hermes looks it up.
pub fn register_of<'py>(
    target: &Bound<'py, PyAny>,
    ep: &EntryPoint,
) -> Result<Bound<'py, PyAny>, PluginError> {
    match target.getattr("register") {
        Ok(r) if r.is_callable() => Ok(r),
        Ok(_) => Err(PluginError::native(format!(
            "register of entry point {} = {} is not callable",
            ep.name, ep.value
        ))),
        Err(_) => Err(PluginError::native(format!(
            "no register() function in entry point {} = {} (distribution {})",
            ep.name, ep.value, ep.distribution
        ))),
    }
}

/// `ctx.manifest` of an entry-point plugin: its name, `source="entrypoint"`,
/// `path` the entry point's value, as Hermes synthesises it.
pub fn manifest_object<'py>(
    py: Python<'py>,
    ep: &EntryPoint,
    group: Group,
) -> PyResult<Bound<'py, PyAny>> {
    let kw = PyDict::new(py);
    kw.set_item("name", &ep.name)?;
    kw.set_item("version", &ep.version)?;
    kw.set_item("description", "")?;
    kw.set_item("author", "")?;
    let kind = match group {
        Group::Plugins => "standalone",
        Group::MemoryProviders => "exclusive",
    };
    kw.set_item("kind", kind)?;
    kw.set_item("key", &ep.name)?;
    kw.set_item("source", "entrypoint")?;
    kw.set_item("path", &ep.value)?;
    kw.set_item("requires_env", pyo3::types::PyList::empty(py))?;
    kw.set_item("provides_tools", pyo3::types::PyList::empty(py))?;
    kw.set_item("provides_hooks", pyo3::types::PyList::empty(py))?;
    py.import("types")?
        .getattr("SimpleNamespace")?
        .call((), Some(&kw))
}
