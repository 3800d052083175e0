//! Codumentor's claims on top-level package names: a plugin's `backend/`
//! goes on `sys.path`, and its top-level package must stay the one plugin's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::outcome::PluginError;
use crate::dialects::shared::load_error;
use crate::runtime::try_attach;

/// Which plugin provides each top-level package put on `sys.path`.
///
/// Process-wide on purpose: a top-level package name lives in the one
/// interpreter's `sys.modules`, which every host of the process shares, so
/// the claim on it must be seen by all of them (each host holds a
/// [`Claim`] count, and the last to go unloads the package).
static PACKAGES: Mutex<Option<HashMap<String, Claim>>> = Mutex::new(None);

/// A top-level package's provider, and how many live hosts hold it (one
/// process may run several hosts: the wheel's `Host`s).
struct Claim {
    key: String,
    backend: PathBuf,
    hosts: usize,
}

/// A host's hold on the package its Codumentor plugin provides: while any
/// host holds it, no other plugin (nor the same key from another directory)
/// may take the name; when the last one goes, the package is unloaded, so
/// a later host imports it afresh.
pub(super) struct PackageHold {
    top: String,
    key: String,
    backend: PathBuf,
}

impl PackageHold {
    /// Take over the hold [`claim_held`] counted for a load that succeeded.
    pub(super) fn new(top: &str, key: &str, backend: &Path) -> PackageHold {
        PackageHold {
            top: top.to_string(),
            key: key.to_string(),
            backend: backend.to_path_buf(),
        }
    }
}

impl Drop for PackageHold {
    fn drop(&mut self) {
        unhold(&self.top, &self.key, &self.backend);
    }
}

/// [`claim`], counting a hold from now on: a load in progress holds the
/// name as a loaded plugin does, so another host's failed load of the same
/// plugin cannot unload what this one is importing.
pub(super) fn claim_held(top: &str, key: &str, backend: &Path) -> Result<(), PluginError> {
    let mut packages = PACKAGES.lock().unwrap_or_else(|e| e.into_inner());
    claim_in(packages.get_or_insert_with(HashMap::new), top, key, backend)?;
    if let Some(claim) = packages.as_mut().and_then(|m| m.get_mut(top)) {
        claim.hosts += 1;
    }
    Ok(())
}

/// Give back a hold of [`claim_held`] (a failed load, or a host gone);
/// the last one unloads the package.
pub(super) fn unhold(top: &str, key: &str, backend: &Path) {
    let last = {
        let mut packages = PACKAGES.lock().unwrap_or_else(|e| e.into_inner());
        match packages.as_mut().and_then(|m| m.get_mut(top)) {
            Some(claim) if claim.key == key && claim.backend == backend => {
                claim.hosts = claim.hosts.saturating_sub(1);
                claim.hosts == 0
            }
            _ => false,
        }
    };
    if last {
        release(top, key, backend);
    }
}

/// Claim top-level package `top` (under `backend`) for plugin `key`. The
/// same plugin from the same directory shares it (another host of the
/// process loading it too).
pub(super) fn claim(top: &str, key: &str, backend: &Path) -> Result<(), PluginError> {
    let mut packages = PACKAGES.lock().unwrap_or_else(|e| e.into_inner());
    claim_in(packages.get_or_insert_with(HashMap::new), top, key, backend)
}

fn claim_in(
    packages: &mut HashMap<String, Claim>,
    top: &str,
    key: &str,
    backend: &Path,
) -> Result<(), PluginError> {
    match packages.get(top) {
        Some(claim) if claim.key != key => Err(load_error(
            "",
            &format!(
                "package '{top}' is already provided by plugin '{}'; two Codumentor plugins cannot share a top-level package name",
                claim.key
            ),
        )),
        Some(claim) if claim.backend != backend => Err(load_error(
            "",
            &format!(
                "package '{top}' of plugin '{key}' is already imported from {} by another host of this process; while that host lives, the plugin cannot load from {}",
                claim.backend.display(),
                backend.display()
            ),
        )),
        Some(_) => Ok(()),
        None => {
            packages.insert(
                top.to_string(),
                Claim {
                    key: key.to_string(),
                    backend: backend.to_path_buf(),
                    hosts: 0,
                },
            );
            Ok(())
        }
    }
}

/// Undo [`claim`] after a failed load (or when the last host holding it
/// goes), and drop what the plugin imported.
pub(super) fn release(top: &str, key: &str, backend: &Path) {
    {
        let mut packages = PACKAGES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = packages.as_mut() {
            match map.get(top) {
                Some(c) if c.key == key && c.backend == backend && c.hosts == 0 => {
                    map.remove(top);
                }
                // Another plugin's name, or one a live host still uses.
                Some(_) => return,
                None => {}
            }
        }
    }
    let _ = try_attach(|py| -> PyResult<()> {
        let sys = py.import("sys")?;
        let modules = sys.getattr("modules")?.cast_into::<PyDict>()?;
        let prefix = format!("{top}.");
        let names: Vec<String> = modules
            .keys()
            .iter()
            .filter_map(|k| k.extract::<String>().ok())
            .filter(|k| k == top || k.starts_with(&prefix))
            .collect();
        for name in names {
            modules.del_item(name)?;
        }
        let path = sys.getattr("path")?;
        let entry = backend.to_string_lossy().into_owned();
        while path.call_method1("count", (&entry,))?.extract::<usize>()? > 0 {
            path.call_method1("remove", (&entry,))?;
        }
        Ok(())
    });
}
