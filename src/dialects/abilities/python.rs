//! The Python classes a dialect adds to the wheel's module.

use super::super::DIALECTS;

/// A dialect whose plugins and embedders use classes of the wheel.
pub trait PythonClasses: Send + Sync {
    /// Add the Python classes its plugins and embedders use to the wheel's
    /// module `m` (Flowly's `PluginContext`).
    fn python_classes(&self, m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()>;
}

/// Every dialect's Python classes, added to the wheel's module `m`.
pub fn add_python_classes(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    DIALECTS
        .iter()
        .filter_map(|d| d.abilities().python_classes)
        .try_for_each(|p| p.python_classes(m))
}
