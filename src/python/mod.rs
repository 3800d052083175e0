//! The embedded interpreter: start-up, the modules plughost installs into
//! it, and the handles the rest of the runtime keeps to Python objects.
//!
//! Everything Python enters the runtime through this module and
//! `crate::dialects`; the core (registry, dispatch) never touches Python.

pub mod api;
pub mod bridge;
pub mod handlers;
pub mod loader;
pub mod native;

use std::ffi::CString;
use std::path::Path;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule};

/// Python sources compiled into the binary so that the standalone binary and
/// the wheel run the very same code, wherever they are installed.
const RUNTIME_SOURCE: &str = include_str!("../../python/plughost/_runtime.py");
const COMPAT_MODULES: [(&str, &str, bool); 5] = [
    (
        "flowly",
        include_str!("../../python/plughost/_compat/flowly/__init__.py"),
        true,
    ),
    (
        "flowly.agent",
        include_str!("../../python/plughost/_compat/flowly/agent/__init__.py"),
        true,
    ),
    (
        "flowly.agent.hooks",
        include_str!("../../python/plughost/_compat/flowly/agent/hooks.py"),
        false,
    ),
    (
        "flowly.plugins",
        include_str!("../../python/plughost/_compat/flowly/plugins.py"),
        false,
    ),
    (
        "flowly.profile",
        include_str!("../../python/plughost/_compat/flowly/profile.py"),
        false,
    ),
];

/// Handles to the Python objects the runtime calls on hot paths.
pub struct PyRuntime {
    pub runtime: Py<PyModule>,
    pub run_eager: Py<PyAny>,
    pub watch: Py<PyAny>,
    pub allow_caller_loop: Py<PyAny>,
    pub cancel: Py<PyAny>,
    pub accepted_keywords: Py<PyAny>,
    pub import_plugin: Py<PyAny>,
    pub forget_plugin: Py<PyAny>,
    pub hooks: FlowlyClasses,
    /// `True` when a real `flowly` package is installed and used.
    pub real_flowly: bool,
}

/// The classes of `flowly.agent.hooks` (real or compat) contexts are built from.
pub struct FlowlyClasses {
    pub tool_ctx: Py<PyAny>,
    pub llm_ctx: Py<PyAny>,
    pub session_ctx: Py<PyAny>,
    pub subagent_ctx: Py<PyAny>,
    pub gateway_ctx: Py<PyAny>,
    pub block: Py<PyAny>,
    pub skip: Py<PyAny>,
    pub rewrite: Py<PyAny>,
    pub namespace: Py<PyAny>,
}

static RUNTIME: OnceLock<PyRuntime> = OnceLock::new();

/// Errors starting the interpreter side.
#[derive(Debug, thiserror::Error)]
#[error("could not start the embedded Python runtime: {0}")]
pub struct StartError(pub String);

/// Start (once) the interpreter and install plughost's modules.
///
/// Safe to call from many threads at once (hosts built in parallel): the
/// first caller installs, the others wait without holding the GIL.
pub fn start(home: &Path, python_log_level: u8) -> Result<&'static PyRuntime, StartError> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    Python::initialize();
    attach(|py| {
        let rt = match RUNTIME.get() {
            Some(rt) => rt,
            None => {
                // Wait for a concurrent installer without holding the GIL it needs.
                let _installing = loop {
                    match INSTALL.try_lock() {
                        Ok(guard) => break guard,
                        Err(std::sync::TryLockError::Poisoned(e)) => break e.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => {
                            py.detach(|| std::thread::sleep(std::time::Duration::from_millis(1)))
                        }
                    }
                };
                match RUNTIME.get() {
                    Some(rt) => rt,
                    None => {
                        let rt = install(py, python_log_level)
                            .map_err(|e| StartError(describe(py, &e)))?;
                        RUNTIME.get_or_init(|| rt)
                    }
                }
            }
        };
        set_home(py, rt, home).map_err(|e| StartError(e.to_string()))?;
        Ok(rt)
    })
}

/// The started runtime. Panics when [`start`] was not called: only code
/// reachable from a started host calls it.
pub fn runtime() -> &'static PyRuntime {
    RUNTIME
        .get()
        .expect("the Python runtime is started before any Python callable is wrapped")
}

fn set_home(py: Python<'_>, rt: &PyRuntime, home: &Path) -> PyResult<()> {
    rt.runtime
        .bind(py)
        .setattr("HOME", home.to_string_lossy().as_ref())
}

fn install(py: Python<'_>, python_log_level: u8) -> PyResult<PyRuntime> {
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
    let runtime = module_from_source(py, "_plughost_runtime", RUNTIME_SOURCE, false)?;

    let find_spec = py.import("importlib.util")?.getattr("find_spec")?;
    let real_flowly = !sys_modules.contains("flowly")? && !find_spec.call1(("flowly",))?.is_none();
    if !real_flowly && !sys_modules.contains("flowly")? {
        for (name, source, is_package) in COMPAT_MODULES {
            let module = module_from_source(py, name, source, is_package)?;
            if let Some((parent, child)) = name.rsplit_once('.') {
                if let Some(parent) = sys_modules.get_item(parent)? {
                    parent.setattr(child, module)?;
                }
            }
        }
    }
    // Level 0: an embedding Python application keeps its own logging set-up.
    if python_log_level > 0 {
        runtime
            .getattr("install_log_forwarding")?
            .call1((python_log_level,))?;
    }

    let hooks = py.import("flowly.agent.hooks")?;
    let get = |name: &str| -> PyResult<Py<PyAny>> { Ok(hooks.getattr(name)?.unbind()) };
    let classes = FlowlyClasses {
        tool_ctx: get("ToolHookContext")?,
        llm_ctx: get("LLMHookContext")?,
        session_ctx: get("SessionHookContext")?,
        subagent_ctx: get("SubagentStopContext")?,
        gateway_ctx: get("GatewayDispatchContext")?,
        block: get("BlockAction")?,
        skip: get("SkipAction")?,
        rewrite: get("RewriteAction")?,
        namespace: py.import("types")?.getattr("SimpleNamespace")?.unbind(),
    };
    let f = |name: &str| -> PyResult<Py<PyAny>> { Ok(runtime.getattr(name)?.unbind()) };
    Ok(PyRuntime {
        run_eager: f("run_eager")?,
        watch: f("watch")?,
        allow_caller_loop: f("allow_caller_loop")?,
        cancel: f("cancel")?,
        accepted_keywords: f("accepted_keywords")?,
        import_plugin: f("import_plugin")?,
        forget_plugin: f("forget_plugin")?,
        runtime: runtime.unbind(),
        hooks: classes,
        real_flowly,
    })
}

/// An embedded interpreter does not notice an activated virtualenv by
/// itself: add its site-packages (as `site` would) when `VIRTUAL_ENV` is set.
fn honour_virtualenv(py: Python<'_>) -> PyResult<()> {
    let Some(venv) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let version = py.version_info();
    let site_packages = std::path::PathBuf::from(venv)
        .join("lib")
        .join(format!("python{}.{}", version.major, version.minor))
        .join("site-packages");
    if site_packages.is_dir() {
        py.import("site")?
            .call_method1("addsitedir", (site_packages.to_string_lossy().as_ref(),))?;
    }
    Ok(())
}

fn module_from_source<'py>(
    py: Python<'py>,
    name: &str,
    source: &str,
    is_package: bool,
) -> PyResult<Bound<'py, PyModule>> {
    let code = CString::new(source).expect("embedded sources have no NUL byte");
    let file = CString::new(format!("<plughost:{name}>")).expect("no NUL");
    let cname = CString::new(name).expect("no NUL");
    if is_package {
        // A package needs __path__ before its children can be imported.
        let module = PyModule::new(py, name)?;
        module.setattr("__path__", pyo3::types::PyList::empty(py))?;
        module.setattr("__file__", format!("<plughost:{name}>"))?;
        let sys_modules = py.import("sys")?.getattr("modules")?;
        sys_modules.set_item(name, &module)?;
        let builtins = py.import("builtins")?;
        let globals = module.dict();
        globals.set_item("__builtins__", builtins)?;
        py.run(&code, Some(&globals), None)?;
        return Ok(module);
    }
    PyModule::from_code(py, &code, &file, &cname)
}

/// Run `f` attached to the interpreter, keeping this thread's Python thread
/// state alive between calls.
///
/// A thread the interpreter did not create (a tokio worker) otherwise gets a
/// fresh thread state on every attach and loses it on every detach; in 3.11
/// that also maps and unmaps the state's frame stack, and the resulting TLB
/// shoot-downs cost tens of microseconds per call under concurrency.
#[inline]
pub fn attach<F, R>(f: F) -> R
where
    F: for<'py> FnOnce(Python<'py>) -> R,
{
    keep_thread_state();
    Python::attach(f)
}

struct KeptThreadState {
    gil_state: pyo3::ffi::PyGILState_STATE,
    saved: *mut pyo3::ffi::PyThreadState,
}

impl Drop for KeptThreadState {
    fn drop(&mut self) {
        // The thread is ending: give its thread state back if the
        // interpreter is still there to take it.
        unsafe {
            if pyo3::ffi::Py_IsInitialized() != 0 {
                pyo3::ffi::PyEval_RestoreThread(self.saved);
                pyo3::ffi::PyGILState_Release(self.gil_state);
            }
        }
    }
}

thread_local! {
    static KEPT: std::cell::RefCell<Option<KeptThreadState>> = const { std::cell::RefCell::new(None) };
}

fn keep_thread_state() {
    KEPT.with(|kept| {
        if kept.borrow().is_some() {
            return;
        }
        unsafe {
            // Only when this thread is not attached already (nested use).
            if pyo3::ffi::Py_IsInitialized() == 0 || pyo3::ffi::PyGILState_Check() != 0 {
                return;
            }
            let gil_state = pyo3::ffi::PyGILState_Ensure();
            let saved = pyo3::ffi::PyEval_SaveThread();
            *kept.borrow_mut() = Some(KeptThreadState { gil_state, saved });
        }
    });
}

/// The interpreter in use, when it has been started.
pub fn interpreter_report() -> Option<crate::doctor::PythonReport> {
    let rt = RUNTIME.get()?;
    attach(|py| -> PyResult<crate::doctor::PythonReport> {
        let sys = py.import("sys")?;
        let flowly = if rt.real_flowly {
            py.import("flowly")?
                .getattr("__file__")
                .map(|f| f.to_string())
                .unwrap_or_else(|_| "real".into())
        } else {
            "compat (plughost's own flowly modules)".into()
        };
        Ok(crate::doctor::PythonReport {
            version: sys.getattr("version")?.extract()?,
            executable: sys.getattr("executable")?.extract()?,
            prefix: sys.getattr("prefix")?.extract()?,
            path: sys.getattr("path")?.extract()?,
            flowly,
        })
    })
    .ok()
}

/// `<ExceptionType>: <message>` for a Python error.
pub fn describe(py: Python<'_>, err: &PyErr) -> String {
    let ty = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
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
