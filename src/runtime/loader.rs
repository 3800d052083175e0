//! Importing a plugin directory as a Python package of its own.

use std::path::Path;

use pyo3::prelude::*;

use crate::core::outcome::PluginError;
use crate::runtime::{attach, plugin_error, runtime, try_attach};

/// A plugin's package, imported for one host as `_plughost_plugins.<slug>`.
///
/// Each load gets its own package, so sibling modules and relative imports
/// work, two plugins with a `util.py` each never collide, and two hosts
/// never share (or replace) each other's plugin modules. Dropping it
/// removes the package and its submodules from `sys.modules`, so a host
/// that goes away frees its plugins.
pub struct PluginPackage {
    slug: String,
    module: Option<Py<PyModule>>,
}

impl PluginPackage {
    /// Import `dir/__init__.py` for a host whose home is `home` (what the
    /// plugin's `get_flowly_home()` returns). On failure nothing of the
    /// plugin stays imported.
    pub fn import(key: &str, dir: &Path, home: &Path) -> Result<PluginPackage, PluginError> {
        attach(|py| {
            let slug = unique_package(key);
            let init = dir.join("__init__.py");
            let module = runtime()
                .import_plugin
                .bind(py)
                .call1((
                    &slug,
                    dir.to_string_lossy().as_ref(),
                    init.to_string_lossy().as_ref(),
                    home.to_string_lossy().as_ref(),
                ))
                .and_then(|m| Ok(m.cast_into::<PyModule>()?))
                .map_err(|e| plugin_error(py, &e))?;
            Ok(PluginPackage {
                slug,
                module: Some(module.unbind()),
            })
        })
    }

    /// The imported module.
    pub fn module<'py>(&self, py: Python<'py>) -> Bound<'py, PyModule> {
        self.module
            .as_ref()
            .expect("set until dropped")
            .bind(py)
            .clone()
    }

    /// The package name under `_plughost_plugins`.
    pub fn slug(&self) -> &str {
        &self.slug
    }
}

impl Drop for PluginPackage {
    fn drop(&mut self) {
        let module = self.module.take();
        let _ = try_attach(|py| {
            drop(module);
            if let Err(e) = runtime().forget_plugin.bind(py).call1((&self.slug,)) {
                tracing::debug!("could not unload plugin package {}: {e}", self.slug);
            }
        });
    }
}

/// The package name for a load of `key`: its slug, with a suffix when this
/// process already loaded a plugin under that slug (another host).
///
/// `LOADS` is process-wide on purpose, not per host: the names it hands out
/// live in the one interpreter's `sys.modules`, which every host of the
/// process shares, so two hosts must never be given the same one.
fn unique_package(key: &str) -> String {
    static LOADS: std::sync::Mutex<Option<std::collections::HashMap<String, u32>>> =
        std::sync::Mutex::new(None);
    let base = slug(key);
    let mut loads = LOADS.lock().unwrap_or_else(|e| e.into_inner());
    let count = loads
        .get_or_insert_with(Default::default)
        .entry(base.clone())
        .or_insert(0);
    *count += 1;
    if *count == 1 {
        base
    } else {
        format!("{base}__{count}")
    }
}

/// A Python identifier made from a plugin key (`my-plugin` → `my_plugin`).
pub fn slug(key: &str) -> String {
    let mut s: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'p');
    }
    s
}
