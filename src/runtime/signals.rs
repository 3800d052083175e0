//! Who owns Ctrl-C (SIGINT) in a process that embeds the interpreter.
//!
//! CPython's `signal` module, when first imported (asyncio imports it as the
//! runtime starts), installs its own SIGINT handler if the disposition is
//! still the default: the handler only sets a flag, and the next Python code
//! run on the main thread raises `KeyboardInterrupt`. tokio's handler, which
//! the CLI listens with, chains to a handler it finds installed, so a Ctrl-C
//! meant for plughost (cancel the turn) also surfaced as a
//! `KeyboardInterrupt` in whichever plugin hook ran next on the main thread
//! (an `onTurnInterrupted` handler, an `on_session_end` callback).
//!
//! The command line claims SIGINT ([`own_interrupt`]): Python's handler is
//! replaced by the default disposition, so until plughost listens (tokio's
//! `ctrl_c`), Ctrl-C ends the process as it ends any Unix tool, and once it
//! listens, only plughost hears it. Plugins see a cancelled turn as
//! `asyncio.CancelledError` in their running coroutines, never as
//! `KeyboardInterrupt`. An application that imports the wheel never calls
//! this: its own SIGINT handling is left as it is.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

/// Set by [`own_interrupt`]; read when the interpreter starts.
static OWNED: AtomicBool = AtomicBool::new(false);

/// Claim SIGINT for the embedding program (the CLI). Call on the main
/// thread, before or after the interpreter starts: if it runs already (the
/// wheel's console script), its handler is released now, else as soon as the
/// runtime has started (`after_start`).
pub fn own_interrupt() {
    OWNED.store(true, Ordering::SeqCst);
    // SAFETY: Py_IsInitialized only reads the runtime's state; it may be
    // called at any time, before initialisation included.
    if unsafe { ffi::Py_IsInitialized() } != 0 {
        super::attach(release_interrupt);
    }
}

/// Whether the embedding program claimed SIGINT.
pub fn interrupt_owned() -> bool {
    OWNED.load(Ordering::SeqCst)
}

/// Called once the runtime has started (and so `signal` is imported).
pub(super) fn after_start(py: Python<'_>) {
    if interrupt_owned() {
        release_interrupt(py);
    }
}

/// Give SIGINT back to the default disposition, unless Python's handler is
/// not the one installed (a program or plugin set its own: theirs stays).
fn release_interrupt(py: Python<'_>) {
    if let Err(e) = try_release(py) {
        tracing::warn!(
            "could not take Ctrl-C over from Python ({}); a Ctrl-C may surface in plugins as KeyboardInterrupt",
            super::describe(py, &e)
        );
    }
}

fn try_release(py: Python<'_>) -> PyResult<()> {
    let threading = py.import("threading")?;
    let current = threading.call_method0("current_thread")?;
    if !current.is(&threading.call_method0("main_thread")?) {
        // Only the main thread may set handlers; the CLI starts the
        // runtime there, so this is an embedding we do not know.
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the runtime did not start on the main thread",
        ));
    }
    // `_signal`, the C module under `signal`: the same functions on plain
    // ints, without `signal`'s enum classes (a millisecond of every start).
    let signal = py.import("_signal")?;
    let sigint = signal.getattr("SIGINT")?;
    let installed = signal.call_method1("getsignal", (&sigint,))?;
    if !installed.is(&signal.getattr("default_int_handler")?) {
        return Ok(());
    }
    signal.call_method1("signal", (&sigint, signal.getattr("SIG_DFL")?))?;
    tracing::debug!("SIGINT is plughost's: Python's KeyboardInterrupt handler is released");
    Ok(())
}
