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

/// Set when the process ends right after the host goes: unloading each
/// plugin package from `sys.modules` (and freeing it) is then left to the
/// exit. See [`leave_packages_to_exit`].
static LEFT_TO_EXIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, a dropped [`PluginPackage`] stays in `sys.modules`: for a
/// command that ends the process once its host is dropped and that ran no
/// plugin code but `register` (a listing), so nothing a plugin's module
/// holds has anything left to write out. The rest of a host's teardown
/// (workers, MCP servers, Hermes `on_unload`) still runs.
pub fn leave_packages_to_exit() {
    LEFT_TO_EXIT.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Drop for PluginPackage {
    fn drop(&mut self) {
        let module = self.module.take();
        if LEFT_TO_EXIT.load(std::sync::atomic::Ordering::Relaxed) {
            // `sys.modules` keeps the package; the process's exit frees it.
            std::mem::forget(module);
            return;
        }
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

/// The code object of embedded module `name` (`source`), compiled once per
/// binary and kept as bytecode the way CPython keeps its own modules'
/// (`__pycache__`): in `<cache>/plughost/bytecode/`, where `<cache>` is
/// `XDG_CACHE_HOME`, else `~/.cache`. A file's name carries a hash of the
/// binary's version, the interpreter's magic number and the source, so a
/// new binary, another Python or edited source never reads a stale one.
/// Nothing is written when Python is told not to write bytecode
/// (`PYTHONDONTWRITEBYTECODE`, `-B`); an unreadable or unwritable cache
/// only costs the compile.
pub fn compiled<'py>(py: Python<'py>, name: &str, source: &str) -> PyResult<Bound<'py, PyAny>> {
    let marshal = py.import("marshal")?;
    let magic: Vec<u8> = py
        .import("_frozen_importlib_external")?
        .getattr("MAGIC_NUMBER")?
        .extract()?;
    let file = bytecode_dir().map(|dir| dir.join(bytecode_name(name, source, &magic)));
    if let Some(bytes) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        let bytes = pyo3::types::PyBytes::new(py, &bytes);
        if let Ok(code) = marshal.call_method1("loads", (bytes,)) {
            return Ok(code);
        }
    }
    let builtins = py.import("builtins")?;
    let code = builtins.call_method1("compile", (source, format!("<plughost:{name}>"), "exec"))?;
    let dont_write: bool = py
        .import("sys")?
        .getattr("dont_write_bytecode")?
        .extract()
        .unwrap_or(false);
    if let (Some(file), false) = (file, dont_write) {
        let bytes: Vec<u8> = marshal.call_method1("dumps", (&code,))?.extract()?;
        if let Err(e) = write_whole(&file, &bytes) {
            tracing::debug!("bytecode cache {}: {e}", file.display());
        }
    }
    Ok(code)
}

fn bytecode_dir() -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(cache.join("plughost").join("bytecode"))
}

/// `<name>.<hash>.pyc`, the hash (FNV-1a, stable across builds) over the
/// binary's version, the interpreter's magic number and the source.
fn bytecode_name(name: &str, source: &str, magic: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts: [&[u8]; 3] = [
        env!("CARGO_PKG_VERSION").as_bytes(),
        magic,
        source.as_bytes(),
    ];
    for part in parts {
        for &b in part.iter().chain(&[0xff]) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{name}.{hash:016x}.pyc")
}

/// Write `bytes` to a temporary file beside `file`, then rename it over:
/// a reader sees the whole file or none.
fn write_whole(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}
