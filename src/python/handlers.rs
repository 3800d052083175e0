//! Python callables as tool and command handlers.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};

use crate::hooks::ToolCallContext;
use crate::python::bridge::{self, Awaited};
use crate::python::{exception_message, runtime};
use crate::registry::{CommandHandler, CommandReturn, ToolHandler, ToolReturn};

/// A Python tool: `handler(**arguments)` plus an optional `check_fn()`.
pub struct PyTool {
    handler: Py<PyAny>,
    check_fn: Option<Py<PyAny>>,
    /// Keyword names the handler accepts; `None` when it takes `**kwargs`.
    accepted: Option<Py<PyFrozenSet>>,
}

impl PyTool {
    pub fn new(
        py: Python<'_>,
        handler: Py<PyAny>,
        check_fn: Option<Py<PyAny>>,
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
            accepted,
        })
    }

    fn kwargs<'py>(
        &self,
        py: Python<'py>,
        ctx: &mut ToolCallContext,
    ) -> PyResult<Bound<'py, PyDict>> {
        let params = crate::dialects::flowly::params_dict(py, ctx)?;
        let Some(accepted) = &self.accepted else {
            return Ok(params);
        };
        let accepted = accepted.bind(py);
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
pub fn result_text(obj: &Bound<'_, PyAny>) -> Result<String, String> {
    if obj.is_none() {
        return Ok(String::new());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s.to_str().map(str::to_string).map_err(|e| e.to_string());
    }
    obj.str().map(|s| s.to_string()).map_err(|e| e.to_string())
}

impl ToolHandler for PyTool {
    fn check(&self) -> Option<Result<bool, String>> {
        let check = self.check_fn.as_ref()?;
        Some(crate::python::attach(|py| {
            match check.bind(py).call0().and_then(|r| r.is_truthy()) {
                Ok(ok) => Ok(ok),
                Err(e) => Err(exception_message(py, &e)),
            }
        }))
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        crate::python::attach(|py| {
            let outcome = self
                .kwargs(py, ctx)
                .and_then(|kwargs| self.handler.bind(py).call((), Some(&kwargs)));
            match outcome {
                Err(e) => ToolReturn::Ready(Err(exception_message(py, &e))),
                Ok(value) => match bridge::resolve(py, value) {
                    Awaited::Ready(r) => ToolReturn::Ready(outcome_text(py, r)),
                    Awaited::Pending(task) => ToolReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        crate::python::attach(|py| outcome_text(py, r))
                    })),
                },
            }
        })
    }
}

fn outcome_text(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<String, String> {
    match r {
        Ok(v) => result_text(v.bind(py)),
        Err(e) => Err(exception_message(py, &e)),
    }
}

/// A Python slash command: `handler(raw_args) -> str | None`, sync or async.
pub struct PyCommand {
    pub handler: Py<PyAny>,
}

fn reply(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<Option<String>, String> {
    match r {
        Ok(v) if v.is_none(py) => Ok(None),
        Ok(v) => result_text(v.bind(py)).map(Some),
        Err(e) => Err(crate::python::describe(py, &e)),
    }
}

impl CommandHandler for PyCommand {
    fn call(&self, raw_args: &str) -> CommandReturn {
        crate::python::attach(|py| match self.handler.bind(py).call1((raw_args,)) {
            Err(e) => CommandReturn::Ready(Err(crate::python::describe(py, &e))),
            Ok(value) => match bridge::resolve(py, value) {
                Awaited::Ready(r) => CommandReturn::Ready(reply(py, r)),
                Awaited::Pending(task) => CommandReturn::Pending(Box::pin(async move {
                    let r = task.await;
                    crate::python::attach(|py| reply(py, r))
                })),
            },
        })
    }
}
