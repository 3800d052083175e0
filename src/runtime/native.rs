//! The `_plughost_native` module: what the runtime's Python half needs from Rust.

use pyo3::prelude::*;

use crate::runtime::bridge::Completion;

/// Fill the module (for the embedded binary and for the wheel alike).
pub fn populate(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Completion>()?;
    module.add_function(wrap_pyfunction!(log, module)?)?;
    module.add_function(wrap_pyfunction!(loop_ended, module)?)?;
    module.add_function(wrap_pyfunction!(interpreter_exiting, module)?)?;
    module.add_function(wrap_pyfunction!(compiled, module)?)?;
    module.add_class::<crate::runtime::recorder::ToolCallLog>()?;
    Ok(())
}

/// The code object of embedded module `name` from the runtime's bytecode
/// cache (see [`crate::runtime::loader::compiled`]): the lazily imported
/// compat modules (`_plughost_flowly_lazy`) are compiled once per binary,
/// like the eager ones, instead of on every start.
#[pyfunction]
fn compiled<'py>(py: Python<'py>, name: &str, source: &str) -> PyResult<Bound<'py, PyAny>> {
    crate::runtime::loader::compiled(py, name, source)
}

/// Forward one Python `logging` record into `tracing` (target `python`).
#[pyfunction]
fn log(level: i32, logger: &str, message: &str) {
    match level {
        l if l >= 40 => tracing::error!(target: "python", logger, "{message}"),
        l if l >= 30 => tracing::warn!(target: "python", logger, "{message}"),
        l if l >= 20 => tracing::info!(target: "python", logger, "{message}"),
        l if l >= 10 => tracing::debug!(target: "python", logger, "{message}"),
        _ => tracing::trace!(target: "python", logger, "{message}"),
    }
}

/// The runtime's asyncio loop thread ended: fail the calls waiting on it.
#[pyfunction]
fn loop_ended() {
    crate::runtime::bridge::loop_ended();
}

/// Python's `atexit`: stop attaching from Rust threads before finalization.
#[pyfunction]
fn interpreter_exiting(py: Python<'_>) {
    crate::runtime::threads::begin_exit(py);
}
