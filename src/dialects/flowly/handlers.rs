//! Flowly's calling conventions for tools and commands: `handler(**args)`
//! with an optional `check_fn()`, and `handler(raw_args)`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};

use crate::core::hooks::ToolCallContext;
use crate::core::outcome::PluginError;
use crate::core::registry::{CommandHandler, CommandReturn, ToolHandler, ToolReturn};
use crate::dialects::shared::call_check_fn;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, runtime, try_attach, Exiting};

/// A Python tool: `handler(**arguments)` plus an optional `check_fn()`.
pub struct PyTool {
    handler: Py<PyAny>,
    check_fn: Option<Py<PyAny>>,
    /// Variables that must be set (non-empty) for the tool to be available.
    requires_env: Vec<String>,
    /// Keyword names the handler accepts; `None` when it takes `**kwargs`.
    accepted: Option<Py<PyFrozenSet>>,
}

impl PyTool {
    pub fn new(
        py: Python<'_>,
        handler: Py<PyAny>,
        check_fn: Option<Py<PyAny>>,
        requires_env: Vec<String>,
    ) -> PyResult<PyTool> {
        let accepted = runtime()
            .accepted_keywords
            .bind(py)
            .call1((handler.bind(py),))?;
        let accepted = if accepted.is_none() {
            None
        } else {
            Some(accepted.cast_into::<PyFrozenSet>()?.unbind())
        };
        Ok(PyTool {
            handler,
            check_fn,
            requires_env,
            accepted,
        })
    }

    fn kwargs<'py>(
        &self,
        py: Python<'py>,
        ctx: &mut ToolCallContext,
    ) -> PyResult<Bound<'py, PyDict>> {
        let params = super::hooks::params_dict(py, ctx)?;
        let Some(accepted) = &self.accepted else {
            return Ok(params);
        };
        let accepted = accepted.bind(py);
        // Usually every argument is accepted: pass the dict as it is (the
        // call unpacks it into a fresh kwargs dict anyway).
        let mut all_accepted = true;
        for k in params.keys() {
            if !accepted.contains(&k)? {
                all_accepted = false;
                break;
            }
        }
        if all_accepted {
            return Ok(params);
        }
        let filtered = PyDict::new(py);
        for (k, v) in params.iter() {
            if accepted.contains(&k)? {
                filtered.set_item(k, v)?;
            } else {
                tracing::debug!("dropping argument {k} that the handler does not accept");
            }
        }
        Ok(filtered)
    }
}

/// `str(result)`, with `None` as the empty string.
pub fn result_text(py: Python<'_>, obj: &Bound<'_, PyAny>) -> Result<String, PluginError> {
    if obj.is_none() {
        return Ok(String::new());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(str::to_string)
            .map_err(|e| plugin_error(py, &e));
    }
    obj.str()
        .map(|s| s.to_string())
        .map_err(|e| plugin_error(py, &e))
}

/// Whether `name` is set to something non-empty (what `requires_env` asks).
pub fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

fn not_run(e: Exiting) -> PluginError {
    PluginError::native(e.to_string())
}

impl ToolHandler for PyTool {
    fn reads_rust_params(&self) -> bool {
        false // it gets the shared Python dict hooks edit in place
    }

    fn check(&self) -> Option<Result<bool, PluginError>> {
        // Dispatch names the missing variable (`Unavailability::MissingEnv`);
        // here it only keeps the tool from being offered.
        if self.requires_env.iter().any(|n| !env_set(n)) {
            return Some(Ok(false));
        }
        self.check_fn.as_ref().map(call_check_fn)
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        try_attach(|py| {
            let called = self
                .kwargs(py, ctx)
                .and_then(|kwargs| self.handler.bind(py).call((), Some(&kwargs)));
            match called {
                Err(e) => ToolReturn::Ready(Err(plugin_error(py, &e))),
                Ok(value) => match bridge::resolve(py, value) {
                    Awaited::Ready(r) => ToolReturn::Ready(outcome_text(py, r)),
                    Awaited::Pending(task) => ToolReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        try_attach(|py| outcome_text(py, r)).unwrap_or_else(|e| Err(not_run(e)))
                    })),
                },
            }
        })
        .unwrap_or_else(|e| ToolReturn::Ready(Err(not_run(e))))
    }
}

fn outcome_text(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<String, PluginError> {
    match r {
        Ok(v) => result_text(py, v.bind(py)),
        Err(e) => Err(plugin_error(py, &e)),
    }
}

/// A Python slash command: `handler(raw_args) -> str | None`, sync or async.
pub struct PyCommand {
    pub handler: Py<PyAny>,
}

fn reply(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<Option<String>, PluginError> {
    match r {
        Ok(v) if v.is_none(py) => Ok(None),
        Ok(v) => result_text(py, v.bind(py)).map(Some),
        Err(e) => Err(plugin_error(py, &e)),
    }
}

impl CommandHandler for PyCommand {
    fn call(&self, raw_args: &str) -> CommandReturn {
        try_attach(|py| match self.handler.bind(py).call1((raw_args,)) {
            Err(e) => CommandReturn::Ready(Err(plugin_error(py, &e))),
            Ok(value) => match bridge::resolve(py, value) {
                Awaited::Ready(r) => CommandReturn::Ready(reply(py, r)),
                Awaited::Pending(task) => CommandReturn::Pending(Box::pin(async move {
                    let r = task.await;
                    try_attach(|py| reply(py, r)).unwrap_or_else(|e| Err(not_run(e)))
                })),
            },
        })
        .unwrap_or_else(|e| CommandReturn::Ready(Err(not_run(e))))
    }
}
