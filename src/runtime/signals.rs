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
//! replaced by the default disposition (by `signal.signal` on the main
//! thread; by the process's disposition itself when the interpreter
//! started on another thread, as the CLI's does when every plugin is
//! isolated and the first Python it needs is elsewhere), so until
//! plughost listens (tokio's `ctrl_c`), Ctrl-C ends the process as it ends
//! any Unix tool, and once it listens, only plughost hears it. Plugins see a cancelled turn as
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
    // `_signal`, the C module under `signal`: the same functions on plain
    // ints, without `signal`'s enum classes (a millisecond of every start).
    let signal = py.import("_signal")?;
    let sigint = signal.getattr("SIGINT")?;
    let installed = signal.call_method1("getsignal", (&sigint,))?;
    if !installed.is(&signal.getattr("default_int_handler")?) {
        return Ok(());
    }
    let threading = py.import("threading")?;
    let current = threading.call_method0("current_thread")?;
    if current.is(&threading.call_method0("main_thread")?) {
        match signal.call_method1("signal", (&sigint, signal.getattr("SIG_DFL")?)) {
            Ok(_) => {
                tracing::debug!(
                    "SIGINT is plughost's: Python's KeyboardInterrupt handler is released"
                );
                return Ok(());
            }
            // Python's main thread, but not the one its signal module
            // takes for it (the interpreter started on another thread):
            // as below.
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyValueError>(py) => {}
            Err(e) => return Err(e),
        }
    }
    // The interpreter started on another thread (the CLI starts it on first
    // use: with every plugin isolated, on the thread that first needs it),
    // where Python refuses to set handlers. Its handler is the process's
    // disposition, which any thread may set: the default again. Python's
    // own table still names its handler, which only `getsignal` reads.
    // SAFETY: signal(2) sets the process's disposition from any thread; the
    // one replaced is Python's C handler (its table names
    // `default_int_handler`, which it installs only with that handler),
    // which just sets a flag for the main thread.
    if unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error().into());
    }
    tracing::debug!(
        "SIGINT is plughost's: Python's KeyboardInterrupt handler is released (from a thread other than the main one)"
    );
    Ok(())
}
