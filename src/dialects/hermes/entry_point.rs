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
            kind: PluginKind::Standalone,
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
/// `dir`; `None` when `dir` is not a metadata directory (a plugin directory).
pub fn find(dir: &Path, key: &str) -> Result<Option<EntryPoint>, PluginError> {
    let is_metadata = dir
        .extension()
        .is_some_and(|x| x == "dist-info" || x == "egg-info");
    if !is_metadata {
        return Ok(None);
    }
    let location = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let scan = entry_points::scan(&[location], GROUP);
    scan.entries
        .into_iter()
        .find(|ep| ep.metadata_dir == dir && ep.name == key)
        .map(Some)
        .ok_or_else(|| {
            PluginError::native(format!(
                "entry point '{key}' of group {GROUP} is no longer in {} (the distribution was changed or removed); reinstall it",
                dir.join("entry_points.txt").display()
            ))
        })
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
pub fn manifest_object<'py>(py: Python<'py>, ep: &EntryPoint) -> PyResult<Bound<'py, PyAny>> {
    let kw = PyDict::new(py);
    kw.set_item("name", &ep.name)?;
    kw.set_item("version", &ep.version)?;
    kw.set_item("description", "")?;
    kw.set_item("author", "")?;
    kw.set_item("kind", "standalone")?;
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
