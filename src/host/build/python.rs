//! The interpreter started for a host's in-process plugins: its runtime's
//! interpreter, with the host's home and shared plugin environment.

use std::path::Path;

/// Start the interpreter of `runtime` for in-process plugins of `home`:
/// plughost's home as their default, and (`shared_env`: a third-party
/// plugin runs in this process) the home's shared environment on
/// `sys.path`.
pub(in crate::host) fn start_python(
    home: &Path,
    runtime: &crate::runtime::Runtime,
    shared_env: bool,
) -> Result<(), crate::runtime::StartError> {
    runtime.interpreter()?;
    set_default_home(home);
    if shared_env {
        add_shared_env(home);
    }
    Ok(())
}

/// What plugin code outside any plugin package (the Python API's direct
/// registrations) sees as its home: the host built last.
///
/// Kept process-wide (an attribute of the interpreter's runtime module):
/// code outside every plugin package belongs to no host, so there is no
/// host to ask; each plugin package gets its own host's home when it is
/// imported.
fn set_default_home(home: &Path) {
    let _ = crate::runtime::try_attach(|py| {
        use pyo3::types::PyAnyMethods;
        let module = crate::runtime::runtime().module(py);
        if let Err(e) = module.setattr("HOME", home.to_string_lossy().as_ref()) {
            tracing::debug!("could not set the default home: {e}");
        }
    });
}

/// Put the home's shared plugin environment (`<home>/envs/shared`, see
/// `plugins::deps::shared`) on `sys.path`, before the interpreter's own
/// site-packages so the versions its plugins were resolved with win, and
/// with its `.pth` files read (`site.addsitedir`). Process-wide, as
/// `sys.path` is: a second host of another home adds its own.
fn add_shared_env(home: &Path) {
    let Some(site) = crate::plugins::deps::shared::site_dir(home) else {
        return;
    };
    const ADD: &std::ffi::CStr = c"import site, sys\nbefore = list(sys.path)\nif d not in before:\n    site.addsitedir(d)\n    new = [p for p in sys.path if p not in before]\n    old = [p for p in sys.path if p in before]\n    at = next((i for i, p in enumerate(old) if p.endswith(('site-packages', 'dist-packages'))), len(old))\n    sys.path[:] = old[:at] + new + old[at:]\n";
    let _ = crate::runtime::try_attach(|py| {
        use pyo3::types::PyDictMethods;
        // One namespace (globals): the comprehensions below read `before`,
        // which a separate locals mapping would hide from them.
        let locals = pyo3::types::PyDict::new(py);
        let run = locals
            .set_item("d", site.to_string_lossy().as_ref())
            .and_then(|()| py.run(ADD, Some(&locals), None));
        if let Err(e) = run {
            tracing::warn!("could not put {} on sys.path: {e}", site.display());
        }
    });
}
