//! The Python API of the wheel: the `plughost._native` extension module.
//!
//! `plughost.Host` and `plughost.Agent` wrap the Rust host and agent; the
//! `plughost` console script runs the same CLI as the binary inside the
//! user's interpreter. Safe from any thread and any event loop: blocking
//! calls release the GIL and keep nothing on the caller's thread; async
//! calls return [`PyCall`] awaitables that do nothing until awaited.

mod agent;
mod awaitable;
mod host;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pub use agent::PyAgent;
pub use awaitable::PyCall;
pub use host::PyHost;

create_exception!(
    plughost,
    PlughostError,
    PyException,
    "Base class of plughost's errors."
);
create_exception!(
    plughost,
    ConfigError,
    PlughostError,
    "config.json or a constructor argument is unusable."
);
create_exception!(
    plughost,
    CommandNotFound,
    PlughostError,
    "No slash command of that name."
);
create_exception!(
    plughost,
    SkillNotFound,
    PlughostError,
    "No skill of that name."
);
create_exception!(
    plughost,
    ModelError,
    PlughostError,
    "The model call of an agent turn failed."
);

/// The `plughost` console script: the CLI inside this interpreter.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| crate::cli::run_args(argv))
}

/// `plughost._native`, the extension module of the wheel.
#[pymodule]
#[pyo3(name = "_native")]
pub fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    crate::runtime::native::populate(m)?;
    m.add_class::<PyHost>()?;
    m.add_class::<PyAgent>()?;
    m.add_class::<PyCall>()?;
    awaitable::install_send_slot(py);
    crate::dialects::add_python_classes(m)?;
    m.add("PlughostError", py.get_type::<PlughostError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("CommandNotFound", py.get_type::<CommandNotFound>())?;
    m.add("SkillNotFound", py.get_type::<SkillNotFound>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    // The runtime's Python half imports `_plughost_native`: this module is it.
    py.import("sys")?
        .getattr("modules")?
        .set_item("_plughost_native", m)?;
    Ok(())
}
