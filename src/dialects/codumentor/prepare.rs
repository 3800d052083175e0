//! The first phase of loading Codumentor plugins: import each module to
//! read its class's `meta["dependencies"]` before the load order is fixed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pyo3::prelude::*;

use super::packages::{claim, release};
use super::{import_class, installed};
use crate::core::outcome::PluginError;
use crate::runtime::{attach, plugin_error};

/// What the first phase of loading found, per plugin directory: the
/// class's `meta["dependencies"]` (kept for the process), or the import's
/// failure (taken by [`Codumentor::load`], so the module is not run twice).
///
/// Process-wide on purpose: it describes a module imported into the one
/// interpreter (held in its `sys.modules` by the [`PACKAGES`] claim), which
/// a second host of the process reuses instead of importing it again; its
/// key is the plugin directory, so hosts of different plugins never meet.
/// A kept import failure is taken by the next load of that directory: two
/// hosts loading one directory at once import the same files, so either
/// failure is the one each would have seen.
static PREPARED: Mutex<Option<HashMap<PathBuf, Prepared>>> = Mutex::new(None);

/// One plugin's first phase: its class's `meta["dependencies"]`, or why
/// its module could not be imported.
type Prepared = Result<Vec<String>, PluginError>;

/// Phase one of loading `key` (from `dir`, entry `entry`): claim its
/// top-level package, import its module and read the class's
/// `meta["dependencies"]`, without building the class. A failure is kept
/// for [`Codumentor::load`] to report; nothing is raised here.
pub(crate) fn prepare(key: &str, dir: &Path, entry: &str) {
    let Some((module_name, class_name)) = entry.split_once(':') else {
        return;
    };
    let top = module_name.split('.').next().unwrap_or(module_name);
    let backend = dir.join("backend");
    let found = claim(top, key, &backend).and_then(|()| {
        attach(|py| {
            // The compat `codumentor` package must be importable first.
            installed(py).map_err(|e| plugin_error(py, &e))?;
            let class = import_class(py, &backend, module_name, class_name)?;
            Ok(meta_dependencies(key, &class))
        })
    });
    let mut prepared = PREPARED.lock().unwrap_or_else(|e| e.into_inner());
    prepared
        .get_or_insert_with(HashMap::new)
        .insert(dir.to_path_buf(), found);
}

/// The names in the class's `meta["dependencies"]`; a value that is not a
/// list of plugin keys is warned about and ignored.
fn meta_dependencies(key: &str, class: &Bound<'_, PyAny>) -> Vec<String> {
    let Ok(meta) = class.getattr("meta") else {
        return Vec::new();
    };
    let Ok(value) = meta.get_item("dependencies") else {
        return Vec::new();
    };
    if value.is_none() {
        return Vec::new();
    }
    match value.extract::<Vec<String>>() {
        Ok(names) if !value.is_instance_of::<pyo3::types::PyString>() => names,
        _ => {
            tracing::warn!(
                "Codumentor plugin '{key}': its class's meta[\"dependencies\"] is not a list of plugin keys; ignored (declare them in plugin.yaml's dependencies)"
            );
            Vec::new()
        }
    }
}

/// `declared` (the manifest's dependencies) plus the names only the
/// class's `meta["dependencies"]` gives, in that order.
pub(crate) fn with_meta_dependencies(declared: &[String], dir: &Path) -> Vec<String> {
    let mut all = declared.to_vec();
    let prepared = PREPARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(Ok(meta)) = prepared.as_ref().and_then(|p| p.get(dir)) {
        for name in meta {
            if !all.contains(name) {
                all.push(name.clone());
            }
        }
    }
    all
}

/// Take a failure [`prepare`] kept for `dir` (its dependencies stay).
pub(super) fn take_prepared(dir: &Path) -> Option<Result<(), PluginError>> {
    let mut prepared = PREPARED.lock().unwrap_or_else(|e| e.into_inner());
    let map = prepared.as_mut()?;
    match map.get(dir)? {
        Ok(_) => Some(Ok(())),
        Err(_) => map.remove(dir).map(|r| r.map(|_| ())),
    }
}

/// A plugin [`prepare`]d (imported) but then kept out before its load (a
/// cycle or a missing dependency found with its `meta["dependencies"]`):
/// give back its package and drop its modules, as a failed load does.
pub(crate) fn release_prepared(key: &str, dir: &Path, entry: &str) {
    let was_prepared = PREPARED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|p| p.contains_key(dir));
    if !was_prepared {
        return;
    }
    let module_name = entry.split_once(':').map_or(entry, |(m, _)| m);
    let top = module_name.split('.').next().unwrap_or(module_name);
    release(top, key, &dir.join("backend"));
}
