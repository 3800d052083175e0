//! Felix's audit and usage sinks (`register_audit_sink(factory)`,
//! `register_usage_sink(factory)`) as core call observers: the audit sink
//! (built once, at its first event, as Felix memoises it) gets a row in the
//! shape of Felix's `record_event` for every tool call — `tool_call` with
//! status `ok`/`error`, and a hook's block as `policy_deny` with
//! `payload.control` = `hook` and `payload.hook` naming the hook that
//! blocked (the reason goes to the model, not into the row); the usage sink gets every model call's token counts. A sink that
//! raises is logged with its traceback and never fails the call it saw.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use serde_json::{json, Value};

use crate::core::observers::{CallObserver, ObservedModelCall, ObservedToolCall};
use crate::core::outcome::ToolOutcome;
use crate::runtime::{plugin_error, try_attach};

/// One Felix plugin's sinks.
pub(super) struct FelixSinks {
    pub owner: String,
    pub audit_factory: Option<Py<PyAny>>,
    pub usage_factory: Option<Py<PyAny>>,
    pub felix: Py<PyModule>,
    audit: PyOnceLock<Py<PyAny>>,
}

impl FelixSinks {
    pub fn new(
        owner: String,
        audit_factory: Option<Py<PyAny>>,
        usage_factory: Option<Py<PyAny>>,
        felix: Py<PyModule>,
    ) -> FelixSinks {
        FelixSinks {
            owner,
            audit_factory,
            usage_factory,
            felix,
            audit: PyOnceLock::new(),
        }
    }

    fn failed(&self, py: Python<'_>, which: &str, e: &PyErr) {
        let error = plugin_error(py, e);
        tracing::warn!(
            "Felix plugin '{}': its {which} sink failed: {}{}",
            self.owner,
            error.message,
            error
                .traceback
                .as_deref()
                .map(|t| format!("\n{t}"))
                .unwrap_or_default()
        );
    }

    fn record_audit(&self, py: Python<'_>, factory: &Py<PyAny>, row: &Value) -> PyResult<()> {
        let sink = self
            .audit
            .get_or_try_init(py, || factory.bind(py).call0().map(Bound::unbind))?;
        let record = sink.bind(py).getattr("record");
        match record {
            Ok(record) if record.is_callable() => {
                record.call1((pythonize::pythonize(py, row)?,))?;
            }
            // Felix calls `record` only when the sink has a callable one.
            _ => {}
        }
        Ok(())
    }
}

/// The row of one finished call: `(event_type, status, payload)`.
fn audit_of(call: &ObservedToolCall<'_>) -> (&'static str, &'static str, Value) {
    let outcome = &call.result.outcome;
    if let ToolOutcome::Blocked { .. } = outcome {
        let mut payload =
            json!({"control": "hook", "tool": call.tool, "call_id": call.tool_call_id});
        // Felix's `payload.hook`: the hook that blocked (`module.qualname`
        // for a Python hook), absent when no hook's answer was the block.
        if let Some((_, label)) = call.blocked_by {
            payload["hook"] = json!(label);
        }
        return ("policy_deny", "denied", payload);
    }
    let status = if outcome.is_ok() { "ok" } else { "error" };
    let payload = json!({
        "tool": call.tool,
        "call_id": call.tool_call_id,
        "outcome": outcome.kind(),
        "duration_ms": call.took.as_secs_f64() * 1000.0,
    });
    ("tool_call", status, payload)
}

fn manifest_id(delegate: bool) -> &'static str {
    if delegate {
        "delegate"
    } else {
        "main"
    }
}

impl CallObserver for FelixSinks {
    fn owner(&self) -> &str {
        &self.owner
    }

    fn tool_call(&self, call: &ObservedToolCall<'_>) {
        let Some(factory) = &self.audit_factory else {
            return;
        };
        let (event_type, status, payload) = audit_of(call);
        let _ = try_attach(|py| {
            let row = self
                .felix
                .bind(py)
                .getattr("audit_row")
                .and_then(|f| {
                    f.call1((
                        event_type,
                        manifest_id(call.delegate),
                        status,
                        pythonize::pythonize(py, &payload)?,
                    ))
                })
                .and_then(|row| pythonize::depythonize::<Value>(&row).map_err(PyErr::from));
            if let Err(e) = row.and_then(|row| self.record_audit(py, factory, &row)) {
                self.failed(py, "audit", &e);
            }
        });
    }

    fn model_call(&self, call: &ObservedModelCall<'_>) {
        let Some(factory) = &self.usage_factory else {
            return;
        };
        // Felix meters the calls whose provider reported usage.
        if call.usage.is_empty() {
            return;
        }
        let _ = try_attach(|py| {
            let done = pythonize::pythonize(py, call.usage)
                .map_err(PyErr::from)
                .and_then(|usage| {
                    self.felix.bind(py).getattr("record_usage")?.call1((
                        factory.bind(py),
                        "main",
                        call.model,
                        usage,
                    ))
                });
            if let Err(e) = done {
                self.failed(py, "usage", &e);
            }
        });
    }
}
