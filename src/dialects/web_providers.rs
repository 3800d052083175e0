//! Web search/extract providers of a plugin running in a worker process
//! (issue 47): both ends, in the manner of [`crate::dialects::host_calls`]
//! (any dialect's providers: they all land in the one registry, see
//! [`crate::dialects::flowly::web`]).
//!
//! In-process, a `kind: backend` plugin (Flowly's, or Hermes's
//! `register_web_search_provider`) puts its provider in the one registry
//! plughost's `web_search` / `web_extract` tools read. Isolated, the
//! provider lands in its worker's registry. So the worker announces what
//! its plugin registered ([`announced_since`]), plughost registers a
//! stand-in of the same name whose methods ask the worker
//! ([`register_proxy`] over a [`WebCalls`] the isolation layer gives), and
//! the worker runs them on the real provider ([`call_in_worker`]): the
//! tools, their selection rules and `plugins doctor`'s report see the
//! provider as if it were in-process.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::outcome::PluginError;
use crate::core::points::BoxFuture;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, try_attach};

/// A provider as its worker announces it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebProviderWire {
    pub name: String,
    pub display_name: String,
    pub search: bool,
    pub extract: bool,
}

/// How plughost's stand-in reaches the worker: run `method` of provider
/// `name` with `args` (a JSON list) and `kwargs` (a JSON object); its
/// answer (JSON), blocking. Implemented by the isolation layer.
pub trait WebCalls: Send + Sync + 'static {
    fn call(&self, name: &str, method: &str, args: Value, kwargs: Value) -> Result<Value, String>;
}

fn web(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    super::flowly::classes(py)?;
    Ok(py.import("_plughost_web")?.into_any())
}

/// Whether a web provider registry was imported in this process (without
/// one, no provider was registered: nothing more is imported to ask).
fn registry_imported(py: Python<'_>) -> bool {
    py.import("sys")
        .and_then(|sys| sys.getattr("modules"))
        .and_then(|m| m.contains("flowly.agent.tools.web_providers.registry"))
        .unwrap_or(false)
}

/// In a worker, before its plugin loads: the providers registered so far.
pub fn provider_names() -> Vec<String> {
    try_attach(|py| {
        if !registry_imported(py) {
            return Vec::new();
        }
        web(py)
            .and_then(|w| w.call_method0("worker_names"))
            .and_then(|names| names.extract::<Vec<String>>())
            .unwrap_or_default()
    })
    .unwrap_or_default()
}

/// In a worker, after its plugin loaded: the providers it registered.
pub fn announced_since(before: &[String]) -> Vec<WebProviderWire> {
    let said = try_attach(|py| {
        if !registry_imported(py) {
            return Ok("[]".to_string());
        }
        web(py)
            .and_then(|w| w.call_method1("worker_announce", (before.to_vec(),)))
            .and_then(|text| text.extract::<String>())
            .map_err(|e| plugin_error(py, &e).described())
    });
    match said.map_err(|e| e.to_string()).and_then(|r| r) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_default(),
        Err(e) => {
            tracing::warn!("the web providers this plugin registered cannot be listed: {e}");
            Vec::new()
        }
    }
}

/// In a worker: run `method` of its provider `name`; the answer as JSON.
pub fn call_in_worker(
    name: &str,
    method: &str,
    args: &Value,
    kwargs: &Value,
) -> BoxFuture<Result<Value, PluginError>> {
    let started = try_attach(|py| {
        let coroutine = web(py)
            .and_then(|w| {
                w.call_method1(
                    "worker_call",
                    (name, method, args.to_string(), kwargs.to_string()),
                )
            })
            .map_err(|e| plugin_error(py, &e))?;
        Ok::<_, PluginError>(bridge::resolve(py, coroutine))
    })
    .map_err(|e| PluginError::native(e.to_string()))
    .and_then(|r| r);
    let answer = |r: PyResult<Py<PyAny>>| -> Result<Value, PluginError> {
        try_attach(|py| {
            let text: String = r
                .and_then(|v| v.bind(py).extract())
                .map_err(|e| plugin_error(py, &e))?;
            serde_json::from_str(&text).map_err(|e| PluginError::native(e.to_string()))
        })
        .map_err(|e| PluginError::native(e.to_string()))
        .and_then(|r| r)
    };
    match started {
        Err(e) => Box::pin(async move { Err(e) }),
        Ok(Awaited::Ready(r)) => {
            let done = answer(r);
            Box::pin(async move { done })
        }
        Ok(Awaited::Pending(task)) => Box::pin(async move { answer(task.await) }),
    }
}

/// In plughost: register a stand-in for the worker's provider `provider`,
/// whose methods go over `calls` (a method waits with the GIL released).
pub fn register_proxy(provider: &WebProviderWire, calls: Arc<dyn WebCalls>) -> Result<(), String> {
    crate::runtime::Runtime::current()
        .interpreter()
        .map_err(|e| e.to_string())?;
    let name = provider.name.clone();
    try_attach(|py| {
        let call = PyCFunction::new_closure(
            py,
            None,
            None,
            move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<String> {
                let (method, args_json, kwargs_json): (String, String, String) = args.extract()?;
                let parse = |text: &str| {
                    serde_json::from_str::<Value>(text)
                        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
                };
                let (a, k) = (parse(&args_json)?, parse(&kwargs_json)?);
                let calls = calls.clone();
                let name = name.clone();
                let answer = args
                    .py()
                    .detach(move || calls.call(&name, &method, a, k))
                    .map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
                Ok(answer.to_string())
            },
        )?;
        web(py)?.call_method1(
            "register_worker_provider",
            (
                &provider.name,
                &provider.display_name,
                provider.search,
                provider.extract,
                call,
            ),
        )?;
        Ok::<_, PyErr>(())
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}
