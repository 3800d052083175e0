//! The `_plughost_native` module: what Python code needs from Rust.

use pyo3::prelude::*;

use crate::dialects::flowly::PluginContext;
use crate::python::bridge::Completion;

/// Fill the module (for the embedded binary and for the wheel alike).
pub fn populate(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PluginContext>()?;
    module.add_class::<Completion>()?;
    module.add_function(wrap_pyfunction!(log, module)?)?;
    Ok(())
}

/// Forward one Python `logging` record into `tracing` (target `python`).
#[pyfunction]
fn log(py: Python<'_>, level: i32, logger: &str, message: &str) {
    // Formatting happens outside the GIL-held interpreter loop only in the
    // subscriber; the record is already rendered by `logging`.
    let _ = py;
    match level {
        l if l >= 40 => tracing::error!(target: "python", logger, "{message}"),
        l if l >= 30 => tracing::warn!(target: "python", logger, "{message}"),
        l if l >= 20 => tracing::info!(target: "python", logger, "{message}"),
        l if l >= 10 => tracing::debug!(target: "python", logger, "{message}"),
        _ => tracing::trace!(target: "python", logger, "{message}"),
    }
}
