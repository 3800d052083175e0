//! A changed plugin's code imported afresh: CPython keeps imported modules
//! in `sys.modules`, so loading a plugin's new version (a reload) would
//! otherwise get the old version's module objects back from the cache and
//! run the old code until a second reload.
//!
//! [`refresh`] remembers, per plugin source directory, the files' stamp
//! when its modules were imported; when the stamp differs at the next load,
//! the modules of the plugin's top-level package that were imported from
//! that directory are dropped from `sys.modules` (the old version's objects
//! stay alive for the calls still holding them), so the import runs the new
//! files. An unchanged directory (a second host of the process, or
//! Codumentor's two load phases) keeps its imported modules.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Directory → stamp of its files when its modules were last imported.
///
/// Process-wide on purpose: it describes `sys.modules`, which every host
/// of the process shares.
static IMPORTED: Mutex<Option<HashMap<PathBuf, u64>>> = Mutex::new(None);

/// Before importing top-level package `top` from `dir`: drop its cached
/// modules when `dir`'s files changed since they were imported.
pub fn refresh(py: Python<'_>, top: &str, dir: &Path) {
    let now = stamp_of(dir);
    let before = {
        let mut imported = IMPORTED.lock().unwrap_or_else(|e| e.into_inner());
        imported
            .get_or_insert_with(HashMap::new)
            .insert(dir.to_path_buf(), now)
    };
    if before.is_some_and(|b| b != now) {
        if let Err(e) = forget(py, top, dir) {
            tracing::warn!(
                "cannot drop the old modules of '{top}' from sys.modules: {e}; the old code may run until the next reload"
            );
        }
    }
}

/// Remove `top` and `top.*` from `sys.modules` where their file is under `dir`.
fn forget(py: Python<'_>, top: &str, dir: &Path) -> PyResult<()> {
    let modules = py
        .import("sys")?
        .getattr("modules")?
        .cast_into::<PyDict>()?;
    let root = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let prefix = format!("{top}.");
    let mut gone = Vec::new();
    for (name, module) in modules.iter() {
        let Ok(name) = name.extract::<String>() else {
            continue;
        };
        if name != top && !name.starts_with(&prefix) {
            continue;
        }
        let file: Option<String> = module
            .getattr("__file__")
            .ok()
            .and_then(|f| f.extract().ok());
        let under = file.is_some_and(|f| {
            std::fs::canonicalize(&f)
                .unwrap_or_else(|_| PathBuf::from(&f))
                .starts_with(&root)
        });
        if under {
            gone.push(name);
        }
    }
    for name in gone {
        modules.del_item(name)?;
    }
    py.import("importlib")?.call_method0("invalidate_caches")?;
    Ok(())
}

/// What a plugin directory's files are now: a hash of every file's path,
/// size and modification time (`__pycache__` and `.pyc` left out: Python
/// writes those itself).
pub fn stamp_of(dir: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut files = Vec::new();
    collect(dir, dir, &mut files, 0);
    files.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut hasher);
    hasher.finish()
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u64, u128)>, depth: usize) {
    // Listed through the build's view (discovery listed the plugin's directory).
    let Ok(entries) = crate::plugins::snapshot::entries(dir) else {
        return;
    };
    for entry in entries.iter() {
        let path = dir.join(&entry.name);
        if entry.name == "__pycache__" || path.extension().is_some_and(|e| e == "pyc") {
            continue;
        }
        let Ok(meta) = crate::plugins::snapshot::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if depth < 16 {
                collect(root, &path, out, depth + 1);
            }
            continue;
        }
        let modified = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        out.push((rel, meta.len(), modified));
    }
}
