//! The runtime: the one owner of the embedded interpreter.
//!
//! A [`Runtime`] is the handle a host is built from, as wasmtime's
//! `Linker::new(&engine)` is: [`Runtime::start`] builds the process's one
//! runtime with its [`Settings`] (asking again with other settings is an
//! error), clones share it, and it starts the process-wide [`Interpreter`]
//! the first time a plugin needs it; [`Runtime::none`] never starts
//! CPython, for hosts of native Rust tools, hooks and commands only. The
//! [`Interpreter`] (CPython has one per process) is started once and shared
//! by every host. This module owns the interpreter's start, the rule for
//! which threads keep a Python thread state ([`threads`]), the supervised
//! asyncio loop and the one entry that starts a coroutine with its
//! completion attached ([`bridge`]), and the process's one tokio runtime
//! ([`Runtime::tokio`]).
//!
//! This module is interpreter mechanics only: no plugin API lives here,
//! and nothing here knows about the layers built on it.

pub mod asgi;
pub mod bridge;
mod handle;
pub mod loader;
pub mod native;
pub mod recorder;
pub mod signals;
pub mod threads;
pub mod value;
pub mod watchdog;

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule, PyTuple};
use serde::Serialize;

pub use handle::{wait_on_process, Runtime, RuntimeError, Settings};
pub use threads::{attach, thread_started, try_attach, Exiting};

use crate::core::outcome::PluginError;

/// Python source of the runtime's half, compiled into the binary so that
/// the standalone binary and the wheel run the very same code.
const RUNTIME_SOURCE: &str = include_str!("../../python/plughost/_runtime.py");

/// The tokio runtime a host's agent runs on, captured when the agent is
/// set on the host ([`CallerRuntime::capture`]): a plugin's synchronous
/// call back into the agent (Hermes's `ctx.dispatch_tool`, `ctx.llm`) runs
/// there, so a process keeps one tokio runtime (the embedder's, or the one
/// plughost's CLI and wheel run on).
#[derive(Default)]
pub struct CallerRuntime(std::sync::RwLock<Option<tokio::runtime::Handle>>);

impl CallerRuntime {
    /// Remember the runtime of the calling thread, when it is a
    /// multi-threaded one (a current-thread runtime's one thread may be the
    /// very thread that then waits, which would never run the work).
    pub fn capture(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        }
    }

    /// Where to spawn work a thread outside it waits for: the captured
    /// runtime; else plughost's own (started on first use, so only a
    /// process whose agent runs on a current-thread runtime, or with no
    /// agent, gets it); `None` when the interpreter is not running.
    pub fn handle(&self) -> Option<tokio::runtime::Handle> {
        if let Some(h) = self.0.read().unwrap_or_else(|e| e.into_inner()).clone() {
            return Some(h);
        }
        Runtime::get().map(|r| r.tokio().handle().clone())
    }
}

/// The embedded interpreter's `sys.path` directories, read once per
/// process. Discovery runs before plughost's runtime is installed, so this
/// only initialises the interpreter (which the runtime does first anyway)
/// and reads `sys.path`: no plughost module, no import of site-packages.
/// An active virtualenv's site-packages, which the runtime adds to
/// `sys.path` when it starts, is counted already (last, as the runtime
/// appends it), so a distribution pip-installed there is found.
fn sys_path() -> &'static [PathBuf] {
    static PATH: OnceLock<Vec<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: Py_IsInitialized only reads the runtime's state flag; it
        // may be called before (and without) Py_Initialize.
        if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
            if let Some(dirs) = sys_path_outside() {
                return dirs;
            }
        }
        pyo3::Python::initialize();
        let path: Option<(Vec<String>, Option<PathBuf>)> = try_attach(|py| {
            use pyo3::types::PyAnyMethods;
            let path = py
                .import("sys")
                .and_then(|sys| sys.getattr("path"))
                .and_then(|p| p.extract())
                .ok()?;
            Some((path, virtualenv_site_packages(py)))
        })
        .ok()
        .flatten();
        path.map(|(path, venv)| {
            let mut dirs: Vec<PathBuf> = path
                .into_iter()
                .map(|p| {
                    if p.is_empty() {
                        // "" is the current directory, as Python reads it.
                        std::env::current_dir().unwrap_or_default()
                    } else {
                        PathBuf::from(p)
                    }
                })
                .collect();
            if let Some(site) = venv.filter(|site| !dirs.contains(site)) {
                dirs.push(site);
            }
            dirs
        })
        .unwrap_or_default()
    })
}

/// The `sys.path` the embedded interpreter would have, read from a child
/// process of the interpreter plughost was built against, so that looking
/// where Python imports from does not start CPython in this process (a host
/// of native parts only never does; Python starts when a plugin needs it).
/// `None` (the caller then reads it in-process, starting the interpreter)
/// when that interpreter is not there, is of another version, or is a
/// virtualenv's (whose `sys.path` the embedded libpython would not have).
/// The child runs with `-P` (3.11+), as embedded Python prepends no script
/// directory; it inherits the environment (`PYTHONPATH`, `PYTHONHOME`).
fn sys_path_outside() -> Option<Vec<PathBuf>> {
    let executable = option_env!("PLUGHOST_BUILD_PYTHON")?;
    let version = option_env!("PLUGHOST_BUILD_PYTHON_VERSION")?;
    let script = "import sys\nif sys.prefix == sys.base_prefix:\n    print('%d.%d' % sys.version_info[:2])\n    print('\\0'.join(sys.path), end='')\n";
    let out = std::process::Command::new(executable)
        .args(["-P", "-c", script])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (seen, path) = text.split_once('\n')?;
    if !out.status.success() || seen != version {
        return None;
    }
    let mut dirs: Vec<PathBuf> = path
        .split('\0')
        .map(|p| {
            if p.is_empty() {
                std::env::current_dir().unwrap_or_default()
            } else {
                PathBuf::from(p)
            }
        })
        .collect();
    if let Some(site) = venv_site_packages(version).filter(|s| !dirs.contains(s)) {
        dirs.push(site);
    }
    Some(dirs)
}

/// The started interpreter: handles to the Python functions it calls on
/// hot paths, and its tokio runtime. One per process.
pub struct Interpreter {
    module: Py<PyModule>,
    pub(crate) start: Py<PyAny>,
    pub(crate) cancel: Py<PyAny>,
    pub(crate) wake: Py<PyAny>,
    pub(crate) wait_future: Py<PyAny>,
    pub(crate) import_plugin: Py<PyAny>,
    pub(crate) forget_plugin: Py<PyAny>,
    pub(crate) exception_report: Py<PyAny>,
    pub(crate) accepted_keywords: Py<PyAny>,
}

static RUNTIME: OnceLock<Interpreter> = OnceLock::new();

/// Errors starting the interpreter side.
#[derive(Debug, thiserror::Error)]
#[error("could not start the embedded Python runtime: {0}")]
pub struct StartError(pub String);

impl Interpreter {
    /// Start the interpreter (once per process) and return it; only
    /// through the process's [`Runtime`] ([`Runtime::interpreter`]), whose
    /// settings it starts with.
    fn start(python_log_level: u8) -> Result<&'static Interpreter, StartError> {
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

    /// The tokio runtime plughost's own threads run on: the process's
    /// ([`Runtime::tokio`]).
    pub fn tokio(&self) -> &'static tokio::runtime::Runtime {
        handle::process_tokio()
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
pub fn runtime() -> &'static Interpreter {
    RUNTIME
        .get()
        .expect("the Python runtime is started before any Python callable is wrapped")
}

/// A Python exception as a [`PluginError`] (see [`Interpreter::plugin_error`]).
pub fn plugin_error(py: Python<'_>, err: &PyErr) -> PluginError {
    runtime().plugin_error(py, err)
}

fn install(py: Python<'_>, python_log_level: u8) -> PyResult<Interpreter> {
    let sys_modules = py
        .import("sys")?
        .getattr("modules")?
        .cast_into::<PyDict>()?;
    if !sys_modules.contains("_plughost_native")? {
        let native = PyModule::new(py, "_plughost_native")?;
        native::populate(&native)?;
        mark_imported(py, &native, "_plughost_native", false)?;
        sys_modules.set_item("_plughost_native", native)?;
    }
    honour_virtualenv(py)?;
    set_argv(py)?;
    set_executable(py)?;
    if PLUGIN_STDOUT_TO_STDERR.load(std::sync::atomic::Ordering::SeqCst) {
        stdout_to_stderr(py)?;
    }
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
    Ok(Interpreter {
        start: f("start")?,
        cancel: f("cancel")?,
        wake: f("wake")?,
        wait_future: f("wait_future")?,
        import_plugin: f("import_plugin")?,
        forget_plugin: f("forget_plugin")?,
        exception_report: f("exception_report")?,
        accepted_keywords: f("accepted_keywords")?,
        module: module.unbind(),
    })
}

/// Set by a command whose stdout is for a program (the process's one
/// stdout, not per-host state): see [`plugin_stdout_to_stderr`].
static PLUGIN_STDOUT_TO_STDERR: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on, what plugins write to `sys.stdout` goes to stderr: the
/// command prints machine-readable output (`--json`, MCP over stdio) on
/// stdout, which a chatty `register()` must not break. plughost's own
/// output (written by Rust to the file descriptor) is unaffected.
pub fn plugin_stdout_to_stderr() {
    PLUGIN_STDOUT_TO_STDERR.store(true, std::sync::atomic::Ordering::SeqCst);
    if RUNTIME.get().is_some() {
        let _ = try_attach(|py| stdout_to_stderr(py).ok());
    }
}

fn stdout_to_stderr(py: Python<'_>) -> PyResult<()> {
    let sys = py.import("sys")?;
    sys.setattr("stdout", sys.getattr("stderr")?)
}

/// An embedded interpreter starts with `sys.argv == ['']`; plugins that
/// read it (argparse defaults, `prog` names) see what plughost was started
/// with, as a Python program would. An embedding application's own
/// `sys.argv` is kept.
fn set_argv(py: Python<'_>) -> PyResult<()> {
    let sys = py.import("sys")?;
    let current: Vec<String> = sys
        .getattr("argv")
        .and_then(|a| a.extract())
        .unwrap_or_default();
    if current.iter().all(|a| a.is_empty()) {
        let argv: Vec<String> = std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        sys.setattr("argv", argv)?;
    }
    Ok(())
}

/// An embedded interpreter's `sys.executable` is plughost itself, so a
/// plugin's `subprocess.run([sys.executable, "-m", "helper"])` would run
/// plughost: point it at a real interpreter of this Python (the active
/// virtualenv's, else the one plughost was built against or its prefix's),
/// when one exists. An embedding application's interpreter is kept.
fn set_executable(py: Python<'_>) -> PyResult<()> {
    let sys = py.import("sys")?;
    let current: String = sys.getattr("executable")?.extract().unwrap_or_default();
    let named_python = std::path::Path::new(&current)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("python"));
    // The plughost binary (not a Python application that imported the
    // wheel, whose interpreter is kept) with a virtualenv active: its
    // interpreter, whatever the embedded one found on `PATH`, so a
    // plugin's child process sees the same packages.
    let plughost_binary = std::env::current_exe().is_ok_and(|exe| {
        exe.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("plughost"))
    });
    let venv_python = std::env::var_os("VIRTUAL_ENV")
        .filter(|v| !v.is_empty())
        .map(|v| PathBuf::from(v).join("bin").join("python"))
        .filter(|p| p.is_file());
    if let (true, Some(venv_python)) = (plughost_binary, &venv_python) {
        sys.setattr("executable", venv_python.to_string_lossy().as_ref())?;
        return Ok(());
    }
    if named_python {
        return Ok(());
    }
    let version = py.version_info();
    let versioned = format!("python{}.{}", version.major, version.minor);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(&venv).join("bin").join("python"));
    }
    if let Some(built) = option_env!("PLUGHOST_BUILD_PYTHON") {
        candidates.push(PathBuf::from(built));
    }
    for prefix in ["prefix", "base_prefix"] {
        if let Ok(p) = sys.getattr(prefix).and_then(|p| p.extract::<String>()) {
            candidates.push(PathBuf::from(&p).join("bin").join(&versioned));
            candidates.push(PathBuf::from(&p).join("bin").join("python3"));
        }
    }
    if let Some(found) = candidates.into_iter().find(|c| c.is_file()) {
        sys.setattr("executable", found.to_string_lossy().as_ref())?;
    }
    Ok(())
}

/// An embedded interpreter does not notice an activated virtualenv by
/// itself: add its site-packages (as `site` would) when `VIRTUAL_ENV` is set.
/// Its entries (the directory and what its `.pth` files add) go before the
/// base interpreter's site-packages, as in the virtualenv's own
/// interpreter: a package the virtualenv upgrades (`typing_extensions`)
/// shadows the base's older copy.
fn honour_virtualenv(py: Python<'_>) -> PyResult<()> {
    let Some(site_packages) = virtualenv_site_packages(py) else {
        return Ok(());
    };
    let path = py
        .import("sys")?
        .getattr("path")?
        .cast_into::<pyo3::types::PyList>()?;
    let before: Vec<String> = path.extract()?;
    py.import("site")?
        .call_method1("addsitedir", (site_packages.to_string_lossy().as_ref(),))?;
    let after: Vec<String> = path.extract()?;
    let added: Vec<String> = after
        .iter()
        .filter(|p| !before.contains(p))
        .cloned()
        .collect();
    let Some(first_site) = before
        .iter()
        .position(|p| p.ends_with("site-packages") || p.ends_with("dist-packages"))
    else {
        return Ok(());
    };
    let mut ordered: Vec<String> = before;
    for (i, entry) in added.into_iter().enumerate() {
        ordered.insert(first_site + i, entry);
    }
    path.call_method1("__setitem__", (pyo3::types::PySlice::full(py), ordered))?;
    Ok(())
}

/// The site-packages directory of the virtualenv `VIRTUAL_ENV` names, for
/// this interpreter's version, when it exists.
pub(crate) fn virtualenv_site_packages(py: Python<'_>) -> Option<std::path::PathBuf> {
    let version = py.version_info();
    venv_site_packages(&format!("{}.{}", version.major, version.minor))
}

/// [`virtualenv_site_packages`] for Python `version` (`3.11`).
fn venv_site_packages(version: &str) -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty())?;
    let site_packages = std::path::PathBuf::from(venv)
        .join("lib")
        .join(format!("python{version}"))
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
    // --- changed by perf: the code object comes from the bytecode cache ---
    let code = loader::compiled(py, name, source)?;
    if is_package {
        let module = PyModule::new(py, name)?;
        module.setattr("__path__", pyo3::types::PyList::empty(py))?;
        module.setattr("__file__", format!("<plughost:{name}>"))?;
        py.import("sys")?
            .getattr("modules")?
            .set_item(name, &module)?;
        let globals = module.dict();
        globals.set_item("__builtins__", py.import("builtins")?)?;
        py.import("builtins")?
            .call_method1("exec", (code, globals))?;
        mark_imported(py, &module, name, is_package)?;
        return Ok(module);
    }
    let file = CString::new(format!("<plughost:{name}>")).expect("no NUL");
    let cname = CString::new(name).expect("no NUL");
    // SAFETY: the GIL is held (`py`); `cname` and `file` are NUL-terminated
    // and outlive the call; `code` is a code object (from `compile` or
    // `marshal.loads` of one). The call returns a new reference or NULL
    // with an exception set, which `from_owned_ptr_or_err` takes over. It is
    // what `PyModule::from_code` calls once it has compiled the source.
    let module = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyImport_ExecCodeModuleEx(cname.as_ptr(), code.as_ptr(), file.as_ptr()),
        )?
    };
    let module = module.cast_into::<PyModule>()?;
    mark_imported(py, &module, name, is_package)?;
    Ok(module)
}

/// Gives a module made here a `__spec__` whose `_initializing` is false,
/// as the import system leaves every module it loads. Without it, each
/// `import` statement naming the module (the compat code imports
/// `_plughost_runtime` inside functions that run on every hook) raised
/// and cleared an `AttributeError` inside CPython, looking for
/// `__spec__._initializing`: about 1.1 µs instead of 0.2 µs.
pub(crate) fn mark_imported(
    py: Python<'_>,
    module: &Bound<'_, PyModule>,
    name: &str,
    is_package: bool,
) -> PyResult<()> {
    let mut spec = module.getattr("__spec__")?;
    if spec.is_none() {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("origin", format!("<plughost:{name}>"))?;
        kwargs.set_item("is_package", is_package)?;
        spec = py
            .import("_frozen_importlib")?
            .getattr("ModuleSpec")?
            .call((name, py.None()), Some(&kwargs))?;
        module.setattr("__spec__", &spec)?;
    }
    spec.setattr("_initializing", false)
}

/// Python's cyclic garbage collector held off while plugins load: their
/// imports allocate thousands of objects (functions, classes, code) that
/// all stay alive, and each 700 allocations started a collection that
/// walked them again, about 5 % of loading 100 plugins. Collection is
/// turned back on when the guard drops, if this guard turned it off.
#[must_use = "collection resumes when the guard drops"]
pub struct GcPaused(bool);

/// See [`GcPaused`]; a no-op before Python starts.
pub fn gc_paused() -> GcPaused {
    if RUNTIME.get().is_none() {
        return GcPaused(false);
    }
    let paused = try_attach(|py| -> PyResult<bool> {
        let gc = py.import("gc")?;
        if !gc.call_method0("isenabled")?.is_truthy()? {
            return Ok(false);
        }
        gc.call_method0("disable")?;
        Ok(true)
    });
    GcPaused(matches!(paused, Ok(Ok(true))))
}

impl Drop for GcPaused {
    fn drop(&mut self) {
        if self.0 {
            let _ = try_attach(|py| {
                let _ = py
                    .import("gc")
                    .and_then(|gc| gc.call_method0("enable").map(drop));
            });
        }
    }
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
