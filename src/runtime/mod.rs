//! The runtime: the one owner of the embedded interpreter.
//!
//! A [`Runtime`] is process-wide (CPython has one interpreter per process),
//! started once and shared by every host, as wasmtime's `Engine` is by its
//! stores. It owns the interpreter's start, the rule for which threads keep
//! a Python thread state ([`threads`]), the supervised asyncio loop and the
//! one entry that starts a coroutine with its completion attached
//! ([`bridge`]), and the tokio runtime plughost's own threads run on.
//! Hosts ([`crate::host::Host`]) are built from it, each with its own home.
//!
//! This module is interpreter mechanics only: no plugin API lives here
//! (see `crate::dialects`), and nothing here knows about hosts.

pub mod bridge;
pub mod loader;
pub mod native;
pub mod signals;
pub mod threads;
pub mod value;

use std::ffi::CString;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule, PyTuple};
use serde::Serialize;

pub use threads::{attach, thread_started, try_attach, Exiting};

use crate::core::outcome::PluginError;

/// Python source of the runtime's half, compiled into the binary so that
/// the standalone binary and the wheel run the very same code.
const RUNTIME_SOURCE: &str = include_str!("../../python/plughost/_runtime.py");

/// The started runtime: handles to the Python functions it calls on hot
/// paths, and its tokio runtime.
pub struct Runtime {
    module: Py<PyModule>,
    pub(crate) start: Py<PyAny>,
    pub(crate) cancel: Py<PyAny>,
    pub(crate) wake: Py<PyAny>,
    pub(crate) wait_future: Py<PyAny>,
    pub(crate) import_plugin: Py<PyAny>,
    pub(crate) forget_plugin: Py<PyAny>,
    pub(crate) exception_report: Py<PyAny>,
    pub(crate) accepted_keywords: Py<PyAny>,
    tokio: OnceLock<tokio::runtime::Runtime>,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Errors starting the interpreter side.
#[derive(Debug, thiserror::Error)]
#[error("could not start the embedded Python runtime: {0}")]
pub struct StartError(pub String);

impl Runtime {
    /// Start the runtime (once per process) and return it.
    ///
    /// Safe to call from many threads at once (hosts built in parallel):
    /// the first caller installs, the others wait with the GIL released.
    /// `python_log_level` > 0 forwards Python `logging` at that level into
    /// `tracing` (the CLI does; an embedding application keeps its own).
    pub fn start(python_log_level: u8) -> Result<&'static Runtime, StartError> {
        static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        if let Some(rt) = RUNTIME.get() {
            return Ok(rt);
        }
        Python::initialize();
        attach(|py| {
            // Wait for a concurrent installer without holding the GIL it needs.
            use pyo3::sync::MutexExt;
            let _installing = INSTALL
                .lock_py_attached(py)
                .unwrap_or_else(|e| e.into_inner());
            if let Some(rt) = RUNTIME.get() {
                return Ok(rt);
            }
            let rt = install(py, python_log_level).map_err(|e| StartError(describe(py, &e)))?;
            Ok(RUNTIME.get_or_init(|| rt))
        })
    }

    /// The runtime, when it has been started.
    pub fn get() -> Option<&'static Runtime> {
        RUNTIME.get()
    }

    /// The tokio runtime plughost's own threads run on (blocking calls of
    /// the Python API, the wheel's agent turns). Its threads are marked as
    /// plughost's ([`thread_started`]) and keep their Python thread states.
    pub fn tokio(&self) -> &tokio::runtime::Runtime {
        self.tokio.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("plughost-worker")
                .on_thread_start(thread_started)
                .build()
                .expect("a tokio runtime")
        })
    }

    /// The runtime's Python module (`_plughost_runtime`).
    pub fn module<'py>(&self, py: Python<'py>) -> &Bound<'py, PyModule> {
        self.module.bind(py)
    }

    /// Turn a Python exception into a typed [`PluginError`], traceback and
    /// location included (formatted once, here).
    pub fn plugin_error(&self, py: Python<'_>, err: &PyErr) -> PluginError {
        let value = err.value(py);
        let base_exception = !err.is_instance_of::<pyo3::exceptions::PyException>(py);
        let report = self
            .exception_report
            .bind(py)
            .call1((value, err.traceback(py)))
            .and_then(|r| r.extract::<(String, String, String, String)>());
        match report {
            Ok((kind, message, traceback, location)) => PluginError {
                kind,
                message,
                traceback: Some(traceback).filter(|t| !t.is_empty()),
                location: Some(location).filter(|l| !l.is_empty()),
                base_exception,
                fault: None,
            },
            Err(_) => PluginError {
                kind: type_name(py, err),
                message: exception_message(py, err),
                traceback: None,
                location: None,
                base_exception,
                fault: None,
            },
        }
    }
}

/// The started runtime, for code reachable only from a started host (a
/// wrapped Python callable exists only once the runtime runs).
pub fn runtime() -> &'static Runtime {
    RUNTIME
        .get()
        .expect("the Python runtime is started before any Python callable is wrapped")
}

/// A Python exception as a [`PluginError`] (see [`Runtime::plugin_error`]).
pub fn plugin_error(py: Python<'_>, err: &PyErr) -> PluginError {
    runtime().plugin_error(py, err)
}

fn install(py: Python<'_>, python_log_level: u8) -> PyResult<Runtime> {
    let sys_modules = py
        .import("sys")?
        .getattr("modules")?
        .cast_into::<PyDict>()?;
    if !sys_modules.contains("_plughost_native")? {
        let native = PyModule::new(py, "_plughost_native")?;
        native::populate(&native)?;
        sys_modules.set_item("_plughost_native", native)?;
    }
    honour_virtualenv(py)?;
    let module = module_from_source(py, "_plughost_runtime", RUNTIME_SOURCE, false)?;
    // Level 0: an embedding Python application keeps its own logging set-up.
    if python_log_level > 0 {
        module
            .getattr("install_log_forwarding")?
            .call1((python_log_level,))?;
    }
    // `signal` is imported by now: a CLI that owns Ctrl-C takes it over.
    signals::after_start(py);
    let f = |name: &str| -> PyResult<Py<PyAny>> { Ok(module.getattr(name)?.unbind()) };
    Ok(Runtime {
        start: f("start")?,
        cancel: f("cancel")?,
        wake: f("wake")?,
        wait_future: f("wait_future")?,
        import_plugin: f("import_plugin")?,
        forget_plugin: f("forget_plugin")?,
        exception_report: f("exception_report")?,
        accepted_keywords: f("accepted_keywords")?,
        module: module.unbind(),
        tokio: OnceLock::new(),
    })
}

/// An embedded interpreter does not notice an activated virtualenv by
/// itself: add its site-packages (as `site` would) when `VIRTUAL_ENV` is set.
fn honour_virtualenv(py: Python<'_>) -> PyResult<()> {
    if let Some(site_packages) = virtualenv_site_packages(py) {
        py.import("site")?
            .call_method1("addsitedir", (site_packages.to_string_lossy().as_ref(),))?;
    }
    Ok(())
}

/// The site-packages directory of the virtualenv `VIRTUAL_ENV` names, for
/// this interpreter's version, when it exists.
pub(crate) fn virtualenv_site_packages(py: Python<'_>) -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty())?;
    let version = py.version_info();
    let site_packages = std::path::PathBuf::from(venv)
        .join("lib")
        .join(format!("python{}.{}", version.major, version.minor))
        .join("site-packages");
    site_packages.is_dir().then_some(site_packages)
}

/// Create module `name` from embedded `source` and put it in `sys.modules`
/// (a package gets an empty `__path__` so children can be added).
pub fn module_from_source<'py>(
    py: Python<'py>,
    name: &str,
    source: &str,
    is_package: bool,
) -> PyResult<Bound<'py, PyModule>> {
    let code = CString::new(source).expect("embedded sources have no NUL byte");
    let file = CString::new(format!("<plughost:{name}>")).expect("no NUL");
    let cname = CString::new(name).expect("no NUL");
    if is_package {
        let module = PyModule::new(py, name)?;
        module.setattr("__path__", pyo3::types::PyList::empty(py))?;
        module.setattr("__file__", format!("<plughost:{name}>"))?;
        py.import("sys")?
            .getattr("modules")?
            .set_item(name, &module)?;
        let globals = module.dict();
        globals.set_item("__builtins__", py.import("builtins")?)?;
        py.run(&code, Some(&globals), None)?;
        return Ok(module);
    }
    PyModule::from_code(py, &code, &file, &cname)
}

/// The interpreter in use, for `plugins doctor`.
#[derive(Clone, Debug, Serialize)]
pub struct InterpreterReport {
    pub version: String,
    pub executable: String,
    pub prefix: String,
    pub path: Vec<String>,
}

/// What the started interpreter is; `None` before it starts.
pub fn interpreter_report() -> Option<InterpreterReport> {
    RUNTIME.get()?;
    try_attach(|py| -> PyResult<InterpreterReport> {
        let sys = py.import("sys")?;
        Ok(InterpreterReport {
            version: sys.getattr("version")?.extract()?,
            executable: sys.getattr("executable")?.extract()?,
            prefix: sys.getattr("prefix")?.extract()?,
            path: sys.getattr("path")?.extract()?,
        })
    })
    .ok()?
    .ok()
}

fn type_name(py: Python<'_>, err: &PyErr) -> String {
    err.get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into())
}

/// `<ExceptionType>: <message>` for a Python error.
pub fn describe(py: Python<'_>, err: &PyErr) -> String {
    let ty = type_name(py, err);
    let msg = exception_message(py, err);
    if msg.is_empty() {
        ty
    } else {
        format!("{ty}: {msg}")
    }
}

/// `str(exc)` for a Python error.
pub fn exception_message(py: Python<'_>, err: &PyErr) -> String {
    err.value(py)
        .str()
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Call `f(*args)` and hand back `(done, value)` tuples from the runtime's
/// Python functions as a pair.
pub(crate) fn pair<'py>(obj: Bound<'py, PyAny>) -> PyResult<(bool, Bound<'py, PyAny>)> {
    let t = obj.cast_into::<PyTuple>()?;
    Ok((t.get_item(0)?.is_truthy()?, t.get_item(1)?))
}
