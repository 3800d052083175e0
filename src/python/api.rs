//! The Python API of the wheel: the `plughost._native` extension module.
//!
//! `plughost.Host` and `plughost.Agent` wrap the Rust host and agent; the
//! `plughost` console script runs the same CLI as the binary inside the
//! user's interpreter. Blocking calls release the GIL; `acall_tool` and
//! `Agent.send` return awaitables that work from a running asyncio loop.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde_json::Value;

use crate::agent::provider::{self, ProviderOptions};
use crate::agent::tools::{self, DelegateSlot, ToolLimits, Workspace};
use crate::agent::{Agent, AgentConfig, Inbound};
use crate::dialects::flowly::PluginContext;
use crate::host::{CommandError, Host};

create_exception!(
    plughost,
    PlughostError,
    PyException,
    "Base class of plughost's errors."
);
create_exception!(
    plughost,
    ConfigError,
    PlughostError,
    "config.json or a constructor argument is unusable."
);
create_exception!(
    plughost,
    CommandNotFound,
    PlughostError,
    "No slash command of that name."
);
create_exception!(
    plughost,
    SkillNotFound,
    PlughostError,
    "No skill of that name."
);
create_exception!(
    plughost,
    ModelError,
    PlughostError,
    "The model call of an agent turn failed."
);

/// Owner name of tools and hooks registered directly on a Host.
const DIRECT_OWNER: &str = "python";

fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

fn to_value(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Value> {
    match obj {
        None => Ok(Value::Object(Default::default())),
        Some(o) if o.is_none() => Ok(Value::Object(Default::default())),
        Some(o) => pythonize::depythonize(o)
            .map_err(|e| PlughostError::new_err(format!("arguments are not JSON-like: {e}"))),
    }
}

struct Options {
    home: Option<PathBuf>,
    project_dir: Option<PathBuf>,
    enable: Vec<String>,
    disable: Vec<String>,
    builtin_tools: bool,
    workspace: Option<PathBuf>,
}

/// A plugin host: discovers and loads plugins on first use.
#[pyclass(name = "Host", module = "plughost")]
pub struct PyHost {
    options: Mutex<Option<Options>>,
    built: OnceLock<Arc<Host>>,
    context: Py<PluginContext>,
    slot: DelegateSlot,
}

impl PyHost {
    /// The built host (built now if needed; direct registrations close).
    fn host(&self, py: Python<'_>) -> PyResult<Arc<Host>> {
        if let Some(h) = self.built.get() {
            return Ok(h.clone());
        }
        let Some(options) = self.options.lock().expect("options").take() else {
            // Another thread is building it right now.
            return self
                .built
                .get()
                .cloned()
                .ok_or_else(|| PlughostError::new_err("the host is being built"));
        };
        let registrations = self.context.borrow(py).finish();
        let mut builder = Host::builder()
            .python_log_level(0)
            .enable(options.enable)
            .disable(options.disable);
        let home = crate::config::resolve_home(options.home.as_deref());
        builder = builder.home(&home);
        if let Some(dir) = options.project_dir {
            builder = builder.project_dir(dir).enable_project_plugins(true);
        }
        if options.builtin_tools || options.workspace.is_some() {
            let dir = options.workspace.unwrap_or_else(|| home.join("workspace"));
            let workspace = Workspace::new(&dir).map_err(|e| {
                ConfigError::new_err(format!("cannot use the workspace {}: {e}", dir.display()))
            })?;
            for tool in tools::builtin_tools(&workspace, &ToolLimits::default()) {
                builder = builder.tool(tool);
            }
            builder = builder.tool(tools::delegate_tool(&self.slot));
        }
        let host = builder
            .registrations(DIRECT_OWNER, registrations)
            .build()
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        let host = Arc::new(host);
        let _ = self.built.set(host.clone());
        Ok(self.built.get().cloned().unwrap_or(host))
    }

    fn context_call(
        &self,
        py: Python<'_>,
        method: &str,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        if self.built.get().is_some() {
            return Err(PlughostError::new_err(format!(
                "{method}: the host has already loaded its plugins; register before its first use"
            )));
        }
        self.context.bind(py).call_method(method, args, kwargs)?;
        Ok(())
    }
}

#[pymethods]
impl PyHost {
    #[new]
    #[pyo3(signature = (home=None, project_dir=None, enable=None, disable=None, *, builtin_tools=false, workspace=None))]
    fn new(
        py: Python<'_>,
        home: Option<PathBuf>,
        project_dir: Option<PathBuf>,
        enable: Option<Vec<String>>,
        disable: Option<Vec<String>>,
        builtin_tools: bool,
        workspace: Option<PathBuf>,
    ) -> PyResult<Self> {
        let resolved = crate::config::resolve_home(home.as_deref());
        crate::python::start(&resolved, 0).map_err(|e| PlughostError::new_err(e.to_string()))?;
        let context = Py::new(
            py,
            PluginContext::new(DIRECT_OWNER, &std::env::current_dir().unwrap_or_default()),
        )?;
        Ok(PyHost {
            options: Mutex::new(Some(Options {
                home,
                project_dir,
                enable: enable.unwrap_or_default(),
                disable: disable.unwrap_or_default(),
                builtin_tools,
                workspace,
            })),
            built: OnceLock::new(),
            context,
            slot: DelegateSlot::default(),
        })
    }

    /// The plughost home in use.
    #[getter]
    fn home(&self, py: Python<'_>) -> PyResult<PathBuf> {
        Ok(self.host(py)?.home().to_path_buf())
    }

    /// The `PluginContext` for registering directly on this host.
    #[getter]
    fn context(&self, py: Python<'_>) -> Py<PluginContext> {
        self.context.clone_ref(py)
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn register_tool(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.context_call(py, "register_tool", args, kwargs)
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn register_hook(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.context_call(py, "register_hook", args, kwargs)
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn register_command(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.context_call(py, "register_command", args, kwargs)
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn register_skill(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.context_call(py, "register_skill", args, kwargs)
    }

    /// Every discovered plugin, as `plughost plugins list --json`.
    fn plugins<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let host = self.host(py)?;
        Ok(pythonize::pythonize(py, host.plugins())?)
    }

    /// Every tool, as `plughost tools list --json`.
    fn tools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let host = self.host(py)?;
        let specs: Vec<_> = host
            .registry()
            .tools()
            .into_iter()
            .map(|t| t.spec.clone())
            .collect();
        Ok(pythonize::pythonize(py, &specs)?)
    }

    /// Run a tool through the full pipeline; the result string (tool-level
    /// errors stay result strings, as in the CLI).
    #[pyo3(signature = (name, args=None, session_id=""))]
    fn call_tool(
        &self,
        py: Python<'_>,
        name: &str,
        args: Option<&Bound<'_, PyAny>>,
        session_id: &str,
    ) -> PyResult<String> {
        let host = self.host(py)?;
        let args = to_value(args)?;
        Ok(py
            .detach(|| runtime().block_on(host.call_tool(name, args, session_id)))
            .text)
    }

    /// `call_tool` as an awaitable, for code running in an asyncio loop.
    #[pyo3(signature = (name, args=None, session_id=String::new()))]
    fn acall_tool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        args: Option<&Bound<'py, PyAny>>,
        session_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let host = self.host(py)?;
        let args = to_value(args)?;
        let mut call = Box::pin(async move { host.call_tool(&name, args, &session_id).await.text });
        // Take the first step right here: a call whose hooks and handler never
        // suspend is done now and costs no thread hop; only one that does is
        // handed to the runtime and resolved on this loop when it finishes.
        let allow = &crate::python::runtime().allow_caller_loop;
        allow.bind(py).call1((true,))?;
        let first = {
            let _entered = runtime().enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            call.as_mut().poll(&mut cx)
        };
        allow.bind(py).call1((false,))?;
        match first {
            std::task::Poll::Ready(text) => {
                let running = py.import("asyncio")?.call_method0("get_running_loop")?;
                let done = running.call_method0("create_future")?;
                done.call_method1("set_result", (text,))?;
                Ok(done)
            }
            std::task::Poll::Pending => {
                pyo3_async_runtimes::tokio::future_into_py(py, async move { Ok(call.await) })
            }
        }
    }

    /// Run a slash command line; its reply, or None.
    fn run_command(&self, py: Python<'_>, line: &str) -> PyResult<Option<String>> {
        let host = self.host(py)?;
        match py.detach(|| runtime().block_on(host.run_command(line))) {
            Ok(reply) => Ok(reply),
            Err(e @ (CommandError::Unknown(_) | CommandError::NotACommand(_))) => {
                Err(CommandNotFound::new_err(e.to_string()))
            }
            Err(e) => Err(PlughostError::new_err(e.to_string())),
        }
    }

    /// The text of skill `plugin:name`.
    fn skill(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        let host = self.host(py)?;
        host.skill(name).map_err(|e| match e {
            crate::host::SkillError::Unknown(_) => SkillNotFound::new_err(e.to_string()),
            other => PlughostError::new_err(other.to_string()),
        })
    }

    fn __repr__(&self) -> String {
        match self.built.get() {
            Some(h) => format!(
                "<plughost.Host home={:?} plugins={}>",
                h.home(),
                h.plugins().len()
            ),
            None => "<plughost.Host (not loaded yet)>".into(),
        }
    }
}

/// The agent loop over a Host.
#[pyclass(name = "Agent", module = "plughost")]
pub struct PyAgent {
    agent: Agent,
}

#[pymethods]
impl PyAgent {
    #[new]
    #[pyo3(signature = (host, model="scripted:demo", *, script=None, base_url=None, system_prompt=None, max_iterations=25, tool_timeout=120.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &PyHost,
        model: &str,
        script: Option<PathBuf>,
        base_url: Option<String>,
        system_prompt: Option<String>,
        max_iterations: usize,
        tool_timeout: f64,
    ) -> PyResult<Self> {
        let built = host.host(py)?;
        let provider = provider::from_spec(model, &ProviderOptions { base_url, script })
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        if !(tool_timeout.is_finite() && tool_timeout > 0.0) {
            return Err(ConfigError::new_err(
                "tool_timeout must be a positive number of seconds",
            ));
        }
        let mut config = AgentConfig {
            max_iterations: max_iterations.max(1),
            tool_timeout: Duration::from_secs_f64(tool_timeout),
            ..AgentConfig::default()
        };
        if let Some(prompt) = system_prompt {
            config.system_prompt = prompt;
        }
        let agent = {
            let _entered = runtime().enter();
            Agent::new(built, provider, config, Some(&host.slot))
        };
        Ok(PyAgent { agent })
    }

    /// One turn; awaitable, resolving to the reply text (`""` when a plugin
    /// dropped the message or a command gave no reply). A failed model call
    /// raises `ModelError`.
    #[pyo3(signature = (message, session_id=String::from("default")))]
    fn send<'py>(
        &self,
        py: Python<'py>,
        message: String,
        session_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.agent.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let report = agent.send(Inbound::new(&session_id, &message), None).await;
            match report.error {
                Some(e) => Err(ModelError::new_err(e)),
                None => Ok(report.reply.unwrap_or_default()),
            }
        })
    }

    /// Fire `on_session_finalize` for every session (awaitable).
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.agent.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.shutdown().await;
            Ok(())
        })
    }
}

/// The `plughost` console script: the CLI inside this interpreter.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| crate::cli::run_args(argv))
}

/// `plughost._native`, the extension module of the wheel.
#[pymodule]
#[pyo3(name = "_native")]
pub fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    crate::python::native::populate(m)?;
    m.add_class::<PyHost>()?;
    m.add_class::<PyAgent>()?;
    m.add("PlughostError", py.get_type::<PlughostError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("CommandNotFound", py.get_type::<CommandNotFound>())?;
    m.add("SkillNotFound", py.get_type::<SkillNotFound>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    // The runtime's Python half imports `_plughost_native`: this module is it.
    py.import("sys")?
        .getattr("modules")?
        .set_item("_plughost_native", m)?;
    Ok(())
}
