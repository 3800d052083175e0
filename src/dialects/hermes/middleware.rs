//! Hermes's `ctx.register_middleware(kind, callback)` on the core's
//! middleware lanes ([`crate::core::pipeline::middleware`]), with Hermes's
//! calling convention (`hermes_cli/middleware.py`): keyword arguments plus
//! `telemetry_schema_version` / `middleware_schema_version`;
//! `tool_request` answers `{"args": {...}}`, `llm_request`
//! `{"request": {...}}` (anything else leaves the value as it was); the
//! execution kinds get `next_call` and return the result, and
//! `LLMExecutionBlocked` (its `reason`, its `metadata` with `checked_by`
//! filled from the callback's name) stops the call.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use serde_json::{Map, Value};

use crate::core::hooks::{
    HookAction, HookCallback, HookEntry, HookError, HookEvent, HookPayload, HookReturn, HookStats,
    LaneId,
};
use crate::core::pipeline::middleware::{ExecCall, ExecError, Execution, Next};
use crate::core::registry::Registration;
use crate::runtime::{plugin_error, try_attach};

const OBSERVER_SCHEMA_VERSION: &str = "hermes.observer.v1";
const MIDDLEWARE_SCHEMA_VERSION: &str = "hermes.middleware.v1";

/// The four kinds Hermes accepts (`VALID_MIDDLEWARE`).
pub const KINDS: [&str; 4] = [
    "tool_request",
    "tool_execution",
    "llm_request",
    "llm_execution",
];

/// One registered middleware callback.
struct HermesMiddleware {
    kind: &'static str,
    callback: Py<PyAny>,
    label: String,
}

fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(pythonize::pythonize(py, v)?)
}

fn base_kwargs<'py>(py: Python<'py>, session_id: &str) -> PyResult<Bound<'py, PyDict>> {
    let kw = PyDict::new(py);
    kw.set_item("telemetry_schema_version", OBSERVER_SCHEMA_VERSION)?;
    kw.set_item("middleware_schema_version", MIDDLEWARE_SCHEMA_VERSION)?;
    kw.set_item("session_id", session_id)?;
    kw.set_item("task_id", "")?;
    kw.set_item("platform", "cli")?;
    Ok(kw)
}

impl HermesMiddleware {
    /// A request kind: the chain's replacement, if the callback gave one.
    fn request(&self, py: Python<'_>, c: &mut crate::core::hooks::LoopContext) -> PyResult<()> {
        let kw = base_kwargs(py, &c.session_id)?;
        let key = if self.kind == "tool_request" {
            kw.set_item("tool_name", &c.tool_call.name)?;
            kw.set_item("args", to_py(py, &c.tool_call.arguments)?)?;
            kw.set_item("original_args", to_py(py, &c.tool_call.arguments)?)?;
            "args"
        } else {
            let request = Value::Object(c.params.clone());
            kw.set_item("request", to_py(py, &request)?)?;
            kw.set_item("original_request", to_py(py, &request)?)?;
            kw.set_item("model", &c.model)?;
            "request"
        };
        let answer = self.callback.bind(py).call((), Some(&kw))?;
        let Ok(answer) = answer.cast::<PyDict>() else {
            return Ok(());
        };
        let Some(value) = answer.get_item(key)? else {
            return Ok(());
        };
        if let Ok(Value::Object(map)) = crate::runtime::value::to_json(&value) {
            if key == "args" {
                c.tool_call.arguments = Value::Object(map);
            } else {
                c.params = map;
            }
        }
        Ok(())
    }
}

impl HookCallback for HermesMiddleware {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let HookPayload::Loop(c) = payload else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let done = try_attach(|py| {
            self.request(py, c)
                .map_err(|e| HookError::Raised(plugin_error(py, &e)))
        });
        HookReturn::Ready(match done {
            Ok(Ok(())) => Ok(HookAction::Continue),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(HookError::NotRun(e.to_string())),
        })
    }

    fn execution(&self) -> Option<&dyn Execution> {
        self.kind
            .ends_with("_execution")
            .then_some(self as &dyn Execution)
    }
}

/// The `next` of one middleware frame while its callback runs.
struct NextSlot {
    next: Option<*mut (dyn FnMut(Value) -> Result<Value, ExecError> + 'static)>,
    /// What `next` failed with, for the frame to pass on.
    failed: Option<ExecError>,
}

// SAFETY: the pointer is only dereferenced under the slot's mutex, while
// the frame that lent it is blocked inside the callback's call (see
// `Execution::run`), and is cleared before that frame returns.
unsafe impl Send for NextSlot {}

/// A `next` taken out of its [`NextSlot`] to be run with the GIL released.
struct LentNext(*mut (dyn FnMut(Value) -> Result<Value, ExecError> + 'static));

// SAFETY: made and run while the slot's mutex is held by the caller (see
// `NextSlot`); only moved to the closure that runs it on the same thread.
unsafe impl Send for LentNext {}

impl LentNext {
    /// # Safety
    /// The frame that lent the pointer must still be inside its call, and
    /// the slot's mutex held (see `NextSlot`).
    unsafe fn call(self, payload: Value) -> Result<Value, ExecError> {
        // SAFETY: the caller's contract above.
        unsafe { (*self.0)(payload) }
    }
}

impl Execution for HermesMiddleware {
    fn run(&self, call: &ExecCall, payload: Value, next: Next<'_>) -> Result<Value, ExecError> {
        // SAFETY: lifetime erased only for the duration of this call: the
        // slot is emptied below before `next`'s borrow ends.
        let erased: *mut (dyn FnMut(Value) -> Result<Value, ExecError> + 'static) = unsafe {
            std::mem::transmute(next as *mut (dyn FnMut(Value) -> Result<Value, ExecError> + '_))
        };
        let slot = Arc::new(Mutex::new(NextSlot {
            next: Some(erased),
            failed: None,
        }));
        let result = try_attach(|py| self.call_py(py, call, payload, &slot))
            .unwrap_or_else(|e| Err(ExecError::Failed(e.to_string())));
        let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
        s.next = None;
        match (result, s.failed.take()) {
            (Ok(v), _) => Ok(v),
            // What `next` ran failed and the callback let it through.
            (Err(ExecError::Failed(_)), Some(downstream)) => Err(downstream),
            (Err(e), _) => Err(e),
        }
    }
}

impl HermesMiddleware {
    fn call_py(
        &self,
        py: Python<'_>,
        call: &ExecCall,
        payload: Value,
        slot: &Arc<Mutex<NextSlot>>,
    ) -> Result<Value, ExecError> {
        let kw = self
            .exec_kwargs(py, call, &payload, slot)
            .map_err(|e| ExecError::Failed(plugin_error(py, &e).described()))?;
        match self.callback.bind(py).call((), Some(&kw)) {
            Ok(v) => Ok(crate::runtime::value::to_json(&v).unwrap_or(Value::Null)),
            Err(e) => Err(self.raised(py, &e)),
        }
    }

    fn exec_kwargs<'py>(
        &self,
        py: Python<'py>,
        call: &ExecCall,
        payload: &Value,
        slot: &Arc<Mutex<NextSlot>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let kw = base_kwargs(py, &call.session_id)?;
        if self.kind == "tool_execution" {
            kw.set_item("tool_name", &call.tool)?;
            kw.set_item("args", to_py(py, payload)?)?;
            kw.set_item("original_args", to_py(py, &call.original)?)?;
        } else {
            kw.set_item("request", to_py(py, payload)?)?;
            kw.set_item("original_request", to_py(py, &call.original)?)?;
        }
        let slot = Arc::clone(slot);
        let fallback = payload.clone();
        let next_call = PyCFunction::new_closure(
            py,
            None,
            None,
            move |args: &Bound<'_, PyTuple>,
                  _kw: Option<&Bound<'_, PyDict>>|
                  -> PyResult<Py<PyAny>> {
                let py = args.py();
                let given = match args.get_item(0) {
                    Ok(a) if !a.is_none() => crate::runtime::value::to_json(&a).map_err(|e| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "next_call: not JSON-like: {e}"
                        ))
                    })?,
                    _ => fallback.clone(),
                };
                // Never waited for with the GIL held: `next` runs with it
                // released, and a second call meanwhile is refused (it is
                // single-use anyway).
                let mut s = match slot.try_lock() {
                    Ok(s) => s,
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => {
                        return Err(pyo3::exceptions::PyRuntimeError::new_err(
                            "next_call() is already running",
                        ))
                    }
                };
                let Some(next) = s.next else {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "next_call() used after its middleware returned",
                    ));
                };
                let next = LentNext(next);
                // The rest of the chain runs without the GIL: it may wait
                // for an isolated plugin's tool, whose worker may call
                // back into this process's Python.
                // SAFETY: see `NextSlot`: the frame that lent `next` is
                // waiting inside this callback, and the mutex is held.
                let ran = py.detach(move || unsafe { next.call(given) });
                match ran {
                    Ok(v) => Ok(to_py(py, &v)?.unbind()),
                    Err(e) => {
                        let text = match &e {
                            ExecError::Blocked { reason, .. } => reason.clone(),
                            ExecError::Failed(m) | ExecError::Downstream(m) => m.clone(),
                        };
                        s.failed = Some(e);
                        Err(pyo3::exceptions::PyRuntimeError::new_err(text))
                    }
                }
            },
        )?;
        kw.set_item("next_call", next_call)?;
        Ok(kw)
    }

    /// A raise as the chain's error: `LLMExecutionBlocked` is a block.
    fn raised(&self, py: Python<'_>, e: &PyErr) -> ExecError {
        let blocked = py
            .import("hermes_cli.middleware")
            .and_then(|m| m.getattr("LLMExecutionBlocked"))
            .is_ok_and(|class| e.value(py).is_instance(&class).unwrap_or(false));
        if blocked {
            let value = e.value(py);
            let reason = value
                .getattr("reason")
                .and_then(|r| r.extract::<String>())
                .unwrap_or_else(|_| value.to_string());
            let mut metadata = value
                .getattr("metadata")
                .ok()
                .and_then(|m| crate::runtime::value::to_json(&m).ok())
                .and_then(|m| match m {
                    Value::Object(m) => Some(m),
                    _ => None,
                })
                .unwrap_or_else(Map::new);
            metadata
                .entry("checked_by")
                .or_insert_with(|| Value::String(self.label.clone()));
            return ExecError::Blocked { reason, metadata };
        }
        let error = plugin_error(py, e);
        tracing::debug!(
            "{} middleware {}: {}",
            self.kind,
            self.label,
            error.traceback.as_deref().unwrap_or("")
        );
        ExecError::Failed(error.described())
    }
}

/// `ctx.register_middleware(kind, callback)`: a subscription of the kind's
/// lane; `None` (warned) for a kind Hermes does not know.
pub fn register(plugin: &str, kind: &str, callback: &Bound<'_, PyAny>) -> Option<Registration> {
    let (kind, lane) = match kind {
        "tool_request" => ("tool_request", &super::lanes::TOOL_REQUEST),
        "tool_execution" => ("tool_execution", &super::lanes::TOOL_EXECUTION),
        "llm_request" | "api_request" => ("llm_request", &super::lanes::LLM_REQUEST),
        "llm_execution" | "api_execution" => ("llm_execution", &super::lanes::LLM_EXECUTION),
        other => {
            tracing::warn!(
                "Plugin '{plugin}' registered unknown middleware kind '{other}' (valid: {}); ignored",
                KINDS.join(", ")
            );
            return None;
        }
    };
    let label = callback
        .getattr("__name__")
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| "middleware".into());
    Some(Registration::Hook {
        event: Some(HookEvent::Lane(LaneId(lane))),
        name: kind.to_string(),
        entry: HookEntry {
            owner: plugin.to_string(),
            label: label.clone(),
            priority: 0,
            callback: Arc::new(HermesMiddleware {
                kind,
                callback: callback.clone().unbind(),
                label,
            }),
            stats: Arc::new(HookStats::default()),
        },
    })
}
