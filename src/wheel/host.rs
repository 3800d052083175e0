//! `plughost.Host`.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use serde_json::Value;

use super::awaitable::{PyCall, Reply};
use super::{CommandNotFound, ConfigError, PlughostError, SkillNotFound};
use crate::agent::tools::{self, DelegateSlot, Workspace};
use crate::dialects::DirectContext as PluginContext;
use crate::host::{CommandError, Host};
use crate::runtime::bridge::InlineDriver;
use crate::runtime::threads::detach_blocking;
use crate::runtime::Runtime;

/// Owner name of tools and hooks registered directly on a Host.
const DIRECT_OWNER: &str = "python";

fn to_value(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Value> {
    match obj {
        None => Ok(Value::Object(Default::default())),
        Some(o) if o.is_none() => Ok(Value::Object(Default::default())),
        Some(o) => crate::runtime::value::to_json(o)
            .map_err(|e| PlughostError::new_err(format!("arguments are not JSON-like: {e}"))),
    }
}

#[derive(Clone)]
struct Options {
    home: Option<PathBuf>,
    project_dir: Option<PathBuf>,
    enable: Vec<String>,
    disable: Vec<String>,
    builtin_tools: bool,
    workspace: Option<PathBuf>,
    isolate: Option<crate::plugins::config::Isolation>,
    hook_timeout: std::time::Duration,
    /// The process's runtime, which the host is built from.
    runtime: Runtime,
}

/// `isolate=`: `"all"`, `"none"`, or a list of plugin keys; not given,
/// `PLUGHOST_ISOLATE` as for the command line (a deployment isolates an
/// application's plugins without a code change).
fn isolation_arg(
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<crate::plugins::config::Isolation>> {
    use crate::plugins::config::Isolation;
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return match std::env::var("PLUGHOST_ISOLATE") {
            Ok(value) => Isolation::parse(&value)
                .map(Some)
                .map_err(|e| ConfigError::new_err(format!("PLUGHOST_ISOLATE: {e}"))),
            Err(_) => Ok(None),
        };
    };
    if let Ok(text) = obj.extract::<String>() {
        return Isolation::parse(&text)
            .map(Some)
            .map_err(|e| ConfigError::new_err(format!("isolate: {e}")));
    }
    match obj.extract::<Vec<String>>() {
        Ok(keys) => Ok(Some(Isolation::Only(keys))),
        Err(_) => Err(ConfigError::new_err(
            "isolate must be \"all\", \"none\", or a list of plugin keys such as [\"demo\"]",
        )),
    }
}

/// A plugin host: discovers and loads plugins on first use (once, even
/// when several threads use it first at the same time).
#[pyclass(name = "Host", module = "plughost", frozen)]
pub struct PyHost {
    options: Options,
    built: PyOnceLock<Arc<Host>>,
    context: Py<PluginContext>,
    pub(super) slot: DelegateSlot,
    /// Set once P0 (`host_start`: Felix startup hooks, Codumentor's
    /// `onServerReady`) has fired, before the first tool call, command or
    /// agent turn: the wheel's counterpart of the CLI's serving commands.
    pub(super) started: Arc<tokio::sync::OnceCell<()>>,
}

impl PyHost {
    /// The built host (built now if needed; direct registrations close).
    pub(super) fn host(&self, py: Python<'_>) -> PyResult<Arc<Host>> {
        self.built
            .get_or_try_init(py, || self.build(py))
            .map(Arc::clone)
    }

    fn build(&self, py: Python<'_>) -> PyResult<Arc<Host>> {
        let options = self.options.clone();
        let registrations = self.context.get().finish();
        let mut builder = Host::builder()
            .runtime(&options.runtime)
            .enable(options.enable)
            .disable(options.disable)
            .hook_timeout(options.hook_timeout);
        let home = crate::plugins::config::resolve_home(options.home.as_deref());
        builder = builder.home(&home);
        if let Some(isolation) = options.isolate {
            builder = builder.isolate(isolation);
        }
        // Workers are this interpreter with the wheel (there is no
        // plughost binary beside a wheel).
        let executable: PathBuf = py.import("sys")?.getattr("executable")?.extract()?;
        builder = builder.worker_command(crate::isolation::WorkerCommand::python(executable));
        if let Some(dir) = options.project_dir {
            builder = builder.project_dir(dir).enable_project_plugins(true);
        }
        if options.builtin_tools || options.workspace.is_some() {
            let dir = options.workspace.unwrap_or_else(|| home.join("workspace"));
            let workspace = Workspace::new(&dir).map_err(|e| {
                ConfigError::new_err(format!("cannot use the workspace {}: {e}", dir.display()))
            })?;
            // The same tools as the CLI's agent.
            for tool in tools::agent_tools(&workspace, &home, &self.slot) {
                builder = builder.tool(tool);
            }
        }
        let builder = builder.registrations(DIRECT_OWNER, registrations);
        let host = py
            .detach(|| builder.build())
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        Ok(Arc::new(host))
    }

    fn still_open(&self, py: Python<'_>, method: &str) -> PyResult<()> {
        if self.built.get(py).is_some() {
            return Err(PlughostError::new_err(format!(
                "{method}: the host has already loaded its plugins; register before its first use"
            )));
        }
        Ok(())
    }

    /// Fire P0 for this host unless it has fired.
    async fn start(started: &tokio::sync::OnceCell<()>, host: &Host) {
        started
            .get_or_init(|| {
                let registry = host.registry();
                async move { crate::core::dispatch::fire_host_start(&registry).await }
            })
            .await;
    }
}

#[pymethods]
impl PyHost {
    #[new]
    #[pyo3(signature = (home=None, project_dir=None, enable=None, disable=None, *, builtin_tools=false, workspace=None, isolate=None, hook_timeout=30.0))]
    #[pyo3(
        text_signature = "(home=None, project_dir=None, enable=None, disable=None, *, builtin_tools=False, workspace=None, isolate=None, hook_timeout=30.0)"
    )]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        py: Python<'_>,
        home: Option<PathBuf>,
        project_dir: Option<PathBuf>,
        enable: Option<Vec<String>>,
        disable: Option<Vec<String>>,
        builtin_tools: bool,
        workspace: Option<PathBuf>,
        isolate: Option<&Bound<'_, PyAny>>,
        hook_timeout: f64,
    ) -> PyResult<Self> {
        let isolate = isolation_arg(isolate)?;
        let hook_timeout = crate::agent::provider::timeout_secs(hook_timeout)
            .map_err(|e| ConfigError::new_err(format!("hook_timeout {e}; got {hook_timeout}")))?;
        // The embedding application keeps its own logging (level 0).
        let runtime =
            Runtime::with_log_level(0).map_err(|e| PlughostError::new_err(e.to_string()))?;
        runtime
            .interpreter()
            .map_err(|e| PlughostError::new_err(e.to_string()))?;
        let context = Py::new(
            py,
            PluginContext::new(DIRECT_OWNER, &std::env::current_dir().unwrap_or_default()),
        )?;
        Ok(PyHost {
            options: Options {
                home,
                project_dir,
                enable: enable.unwrap_or_default(),
                disable: disable.unwrap_or_default(),
                builtin_tools,
                workspace,
                isolate,
                hook_timeout,
                runtime,
            },
            built: PyOnceLock::new(),
            context,
            slot: DelegateSlot::default(),
            started: Arc::default(),
        })
    }

    /// Serve one isolated plugin on stdin/stdout: the entry of the worker
    /// processes a Host with `isolate=` starts (not for direct use).
    #[staticmethod]
    fn _worker_main(py: Python<'_>) {
        py.detach(|| crate::isolation::worker_main())
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

    /// Register a tool on this host, as `PluginContext.register_tool`
    /// (Flowly's keywords included: `toolset` is kept on the tool, an unset
    /// `requires_env` variable makes it unavailable, `is_async` and `emoji`
    /// are accepted).
    #[pyo3(signature = (name, schema=None, handler=None, *, check_fn=None, description="", toolset=None, requires_env=None, is_async=None, emoji=None))]
    #[pyo3(
        text_signature = "($self, name, schema=None, handler=None, *, check_fn=None, description='', toolset=None, requires_env=None, is_async=None, emoji=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn register_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        handler: Option<&Bound<'_, PyAny>>,
        check_fn: Option<&Bound<'_, PyAny>>,
        description: &str,
        toolset: Option<&Bound<'_, PyAny>>,
        requires_env: Option<&Bound<'_, PyAny>>,
        is_async: Option<&Bound<'_, PyAny>>,
        emoji: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.still_open(py, "register_tool")?;
        self.context.get().py_register_tool(
            py,
            name,
            schema,
            handler,
            check_fn,
            description,
            toolset,
            requires_env,
            is_async,
            emoji,
        )
    }

    /// Register a hook on this host, as `PluginContext.register_hook`.
    fn register_hook(
        &self,
        py: Python<'_>,
        event_name: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.still_open(py, "register_hook")?;
        self.context.get().register_hook(event_name, callback)
    }

    /// Register a slash command on this host, as `PluginContext.register_command`.
    #[pyo3(signature = (name, handler, description="", args_hint=""))]
    #[pyo3(text_signature = "($self, name, handler, description='', args_hint='')")]
    fn register_command(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        handler: &Bound<'_, PyAny>,
        description: &str,
        args_hint: &str,
    ) -> PyResult<()> {
        self.still_open(py, "register_command")?;
        self.context
            .get()
            .register_command(name, handler, description, args_hint)
    }

    /// Register a skill on this host, as `PluginContext.register_skill`.
    #[pyo3(signature = (name, path, description=""))]
    #[pyo3(text_signature = "($self, name, path, description='')")]
    fn register_skill(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        path: &Bound<'_, PyAny>,
        description: &str,
    ) -> PyResult<()> {
        self.still_open(py, "register_skill")?;
        self.context.get().register_skill(name, path, description)
    }

    /// Every discovered plugin, as `plughost plugins list --json`.
    fn plugins<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let host = self.host(py)?;
        let records = crate::plugins::lock::with_entries(host.home(), &*host.plugins());
        Ok(pythonize::pythonize(py, &records)?)
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
    #[pyo3(text_signature = "($self, name, args=None, session_id='')")]
    fn call_tool(
        &self,
        py: Python<'_>,
        name: &str,
        args: Option<&Bound<'_, PyAny>>,
        session_id: &str,
    ) -> PyResult<String> {
        let host = self.host(py)?;
        let args = to_value(args)?;
        let tokio = crate::runtime::runtime().tokio();
        // A blocking call never drives coroutines inline, even when made
        // from inside an awaited plughost call (nothing would resume them
        // while this thread blocks): they run on the runtime's loop.
        InlineDriver::suspended(|| {
            let started = &self.started;
            let mut call = pin!(async {
                Self::start(started, &host).await;
                host.call_tool(name, args, session_id).await
            });
            // Take the first step in place, with the GIL held: a call whose
            // hooks and handler never wait is done now. Only one that waits
            // releases the GIL and blocks for the rest.
            // Counted in flight once for the shutdown, not once for each
            // hook and handler it attaches for.
            let first = crate::runtime::threads::in_flight(|| {
                let _entered = tokio.enter();
                call.as_mut().poll(&mut Context::from_waker(Waker::noop()))
            });
            Ok(match first {
                Poll::Ready(result) => result.text,
                Poll::Pending => detach_blocking(py, || tokio.block_on(call)).text,
            })
        })
    }

    /// `call_tool` as an awaitable; nothing runs until it is awaited.
    #[pyo3(signature = (name, args=None, session_id=""))]
    #[pyo3(text_signature = "($self, name, args=None, session_id='')")]
    fn acall_tool(
        &self,
        py: Python<'_>,
        name: &str,
        args: Option<&Bound<'_, PyAny>>,
        session_id: &str,
    ) -> PyResult<PyCall> {
        let host = self.host(py)?;
        let args = to_value(args)?;
        let (name, session_id) = (name.to_string(), session_id.to_string());
        // Once started, the call does not hold the flag (two locked
        // instructions a call for its reference count).
        let started = (!self.started.initialized()).then(|| self.started.clone());
        // Written straight into its allocation (`Box::pin` made it on the
        // stack and copied it there: a tool call's future is kilobytes).
        let call = Box::write(Box::new_uninit(), async move {
            if let Some(started) = started {
                Self::start(&started, &host).await;
            }
            Ok(Reply::Text(
                host.call_tool(&name, args, &session_id).await.text,
            ))
        });
        Ok(PyCall::new(Box::into_pin(call)))
    }

    /// Run a slash command line; its reply, or None.
    fn run_command(&self, py: Python<'_>, line: &str) -> PyResult<Option<String>> {
        let host = self.host(py)?;
        let tokio = crate::runtime::runtime().tokio();
        let ran = InlineDriver::suspended(|| {
            detach_blocking(py, || {
                tokio.block_on(async {
                    Self::start(&self.started, &host).await;
                    host.run_command(line).await
                })
            })
        });
        match ran {
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

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.built.get(py) {
            Some(h) => format!(
                "<plughost.Host home={:?} plugins={}>",
                h.home(),
                h.plugins().len()
            ),
            None => "<plughost.Host (not loaded yet)>".into(),
        }
    }
}
