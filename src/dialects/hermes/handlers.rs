//! Hermes's tool calling convention (`tools/registry.py` `dispatch`):
//! `handler(args, **kwargs)` with the arguments as one positional dict and
//! `task_id` as a keyword, returning a JSON string; availability from
//! `requires_env` and a zero-argument `check_fn` (raising counts as False).

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};

use crate::core::extensions::Extensions;
use crate::core::hooks::ToolCallContext;
use crate::core::outcome::PluginError;
use crate::core::registry::{ToolHandler, ToolReturn};
use crate::dialects::flowly::hooks::params_dict;
use crate::dialects::shared::call_check_fn;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, runtime, try_attach, Exiting};

/// A Hermes tool.
pub struct HermesTool {
    handler: Py<PyAny>,
    check_fn: Option<Py<PyAny>>,
    /// Variables the tool needs set to be offered (`requires_env`).
    requires_env: Vec<String>,
    /// Whether the handler accepts `task_id` (declared, or `**kwargs`).
    takes_task_id: bool,
    /// Its host's state: a call runs as a turn of its session there
    /// ([`super::link::with_calling_turn`]).
    host: Arc<Extensions>,
}

impl HermesTool {
    pub fn new(
        py: Python<'_>,
        handler: Py<PyAny>,
        check_fn: Option<Py<PyAny>>,
        requires_env: Vec<String>,
        host: Arc<Extensions>,
    ) -> PyResult<HermesTool> {
        let accepted = runtime()
            .accepted_keywords
            .bind(py)
            .call1((handler.bind(py),))?;
        let takes_task_id = accepted.is_none()
            || accepted
                .cast_into::<PyFrozenSet>()?
                .contains(intern!(py, "task_id"))?;
        Ok(HermesTool {
            handler,
            check_fn,
            requires_env,
            takes_task_id,
            host,
        })
    }
}

fn not_run(e: Exiting) -> PluginError {
    PluginError::native(e.to_string())
}

/// A handler's answer as the result text: a `str` as it is, a
/// `{"_multimodal": True, ...}` dict as JSON, anything else Hermes's
/// "unsupported result type" failure.
fn result_text(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<String, PluginError> {
    let value = r.map_err(|e| plugin_error(py, &e))?;
    let value = value.bind(py);
    if let Ok(s) = value.cast::<PyString>() {
        return s
            .to_str()
            .map(str::to_string)
            .map_err(|e| plugin_error(py, &e));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let multimodal = d
            .get_item("_multimodal")
            .ok()
            .flatten()
            .is_some_and(|v| v.is_truthy().unwrap_or(false));
        if multimodal {
            return crate::runtime::value::to_json(d.as_any())
                .map(|v| v.to_string())
                .map_err(|e| {
                    PluginError::native(format!("multimodal result is not JSON-like: {e}"))
                });
        }
    }
    let ty = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into());
    Err(PluginError::native(format!(
        "Tool handler returned unsupported result type: {ty}"
    )))
}

impl ToolHandler for HermesTool {
    fn reads_rust_params(&self) -> bool {
        false // it gets the shared Python dict hooks edit in place
    }

    fn check(&self) -> Option<Result<bool, PluginError>> {
        let missing_env = self
            .requires_env
            .iter()
            .any(|v| std::env::var_os(v).is_none_or(|x| x.is_empty()));
        if missing_env {
            return Some(Ok(false));
        }
        self.check_fn.as_ref().map(call_check_fn)
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        try_attach(|py| {
            let session = ctx.session_id.clone();
            let called = || {
                params_dict(py, ctx).and_then(|args| {
                    let kwargs = PyDict::new(py);
                    if self.takes_task_id {
                        let task = (!ctx.task_id.is_empty()).then_some(ctx.task_id.as_str());
                        kwargs.set_item(intern!(py, "task_id"), task)?;
                    }
                    let value = self.handler.bind(py).call((args,), Some(&kwargs))?;
                    // Started (a coroutine's task made) while the calling turn is set.
                    Ok(bridge::resolve(py, value))
                })
            };
            match super::link::with_calling_turn(py, &self.host, &session, called) {
                Err(e) => ToolReturn::Ready(Err(plugin_error(py, &e))),
                Ok(awaited) => match awaited {
                    Awaited::Ready(r) => ToolReturn::Ready(result_text(py, r)),
                    Awaited::Pending(task) => ToolReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        try_attach(|py| result_text(py, r)).unwrap_or_else(|e| Err(not_run(e)))
                    })),
                },
            }
        })
        .unwrap_or_else(|e| ToolReturn::Ready(Err(not_run(e))))
    }
}
