//! `plughost.Agent`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use super::awaitable::{PyCall, Reply};
use super::host::PyHost;
use super::{ConfigError, ModelError};
use crate::agent::provider::{self, ProviderOptions};
use crate::agent::{Agent, AgentConfig, Inbound, TurnReport};
use crate::runtime::runtime;

/// The agent loop over a Host.
#[pyclass(name = "Agent", module = "plughost", frozen)]
pub struct PyAgent {
    agent: Agent,
    /// The host's "started serving" flag, shared with the Host and its
    /// other agents: P0 fires once per Host, before its first use.
    started: Arc<tokio::sync::OnceCell<()>>,
}

impl PyAgent {
    /// One whole turn, after P0 has fired for the host (once).
    fn turn(
        &self,
        message: String,
        session_id: &str,
    ) -> impl std::future::Future<Output = TurnReport> + Send + 'static {
        let agent = self.agent.clone();
        let started = self.started.clone();
        let session_id = session_id.to_string();
        async move {
            started
                .get_or_init(|| {
                    let registry = agent.host().registry();
                    async move { crate::core::dispatch::fire_host_start(&registry).await }
                })
                .await;
            agent.send(Inbound::new(&session_id, &message), None).await
        }
    }
}

/// Run `work` on plughost's tokio runtime (a turn spawns tasks and blocking
/// calls of its own) and await it as a [`PyCall`]; dropping the awaitable
/// (a cancelled caller) aborts the work.
fn spawned<F>(work: F) -> PyCall
where
    F: std::future::Future<Output = PyResult<Reply>> + Send + 'static,
{
    PyCall::new(Box::pin(async move {
        let mut task = AbortOnDrop(runtime().tokio().spawn(work));
        match (&mut task.0).await {
            Ok(result) => result,
            Err(e) => Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "the agent task failed: {e}"
            ))),
        }
    }))
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[pymethods]
impl PyAgent {
    #[new]
    #[pyo3(signature = (host, model="scripted:demo", *, script=None, base_url=None, system_prompt=None, max_iterations=25, tool_timeout=120.0, model_timeout=300.0))]
    #[pyo3(
        text_signature = "(host, model='scripted:demo', *, script=None, base_url=None, system_prompt=None, max_iterations=25, tool_timeout=120.0, model_timeout=300.0)"
    )]
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
        model_timeout: f64,
    ) -> PyResult<Self> {
        let seconds = |name: &str, value: f64| {
            provider::timeout_secs(value)
                .map_err(|e| ConfigError::new_err(format!("{name} {e}; got {value}")))
        };
        let tool_timeout = seconds("tool_timeout", tool_timeout)?;
        let built = host.host(py)?;
        let options = ProviderOptions {
            base_url,
            script,
            model_timeout: Some(seconds("model_timeout", model_timeout)?),
            home: Some(built.home().to_path_buf()),
            profiles: built.extensions().peek(),
        };
        let provider = provider::from_spec(model, &options)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        let mut config = AgentConfig {
            max_iterations: max_iterations.max(1),
            tool_timeout,
            ..AgentConfig::default()
        };
        if let Some(prompt) = system_prompt {
            config.system_prompt = prompt;
        }
        let agent = {
            let _entered = runtime().tokio().enter();
            Agent::new(built, provider, config, Some(&host.slot))
        };
        Ok(PyAgent {
            agent,
            started: host.started.clone(),
        })
    }

    /// One turn; awaitable, resolving to the reply text (`""` when a plugin
    /// dropped the message or a command gave no reply). A failed model call
    /// raises `ModelError`.
    #[pyo3(signature = (message, session_id="default"))]
    #[pyo3(text_signature = "($self, message, session_id='default')")]
    fn send(&self, message: String, session_id: &str) -> PyCall {
        let turn = self.turn(message, session_id);
        spawned(async move {
            let report = turn.await;
            match report.error {
                Some(e) => Err(ModelError::new_err(e)),
                None => Ok(Reply::Text(report.reply.unwrap_or_default())),
            }
        })
    }

    /// One turn; awaitable, resolving to its whole report as a dict, the
    /// document `plughost run --json` prints (`reply`, `tool_calls`,
    /// `model_calls`, `hook_errors`, `aborted`, `ended_by`, `ui_events`,
    /// ...). A failed model call does not raise: the report says
    /// `completed: False` and gives the `error`.
    #[pyo3(signature = (message, session_id="default"))]
    #[pyo3(text_signature = "($self, message, session_id='default')")]
    fn run(&self, message: String, session_id: &str) -> PyCall {
        let turn = self.turn(message, session_id);
        spawned(async move {
            let report = turn.await;
            let document = serde_json::to_value(&report).map_err(|e| {
                pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "the turn's report could not be serialized: {e}"
                ))
            })?;
            Ok(Reply::Json(document))
        })
    }

    /// Fire `on_session_finalize` for every session (awaitable).
    fn shutdown(&self) -> PyCall {
        let agent = self.agent.clone();
        spawned(async move {
            agent.shutdown().await;
            Ok(Reply::Nothing)
        })
    }
}
