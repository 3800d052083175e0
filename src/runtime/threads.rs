//! Which threads keep a Python thread state, and attaching to the
//! interpreter without racing its shutdown.
//!
//! Two rules make the embedding safe from any thread:
//!
//! - Only threads plughost creates (its tokio workers and blocking threads,
//!   marked by [`thread_started`]) keep a thread state between calls. A
//!   thread Python owns (a `threading.Thread`, a thread pool's worker) or a
//!   thread of an embedding service keeps nothing of ours: attaching there
//!   is plain `PyGILState_Ensure`/`Release`, so the thread may exit at any
//!   time. (Keeping a state on a Python thread made its exit abort the
//!   process: Python freed the state, our thread-local gave it back again.)
//! - While the interpreter shuts down (Python's `atexit` runs), no thread of
//!   ours attaches any more: 3.11 ends a thread that takes the GIL during
//!   finalization with `pthread_exit`, which aborts the process when Rust
//!   frames are on its stack. [`begin_exit`] stops new attaches and waits
//!   (bounded) for the ones in flight.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::ffi;
use pyo3::prelude::*;

thread_local! {
    /// Set on threads plughost created.
    static MANAGED: Cell<bool> = const { Cell::new(false) };
    static KEPT: RefCell<Option<KeptThreadState>> = const { RefCell::new(None) };
    /// Attaches (and [`in_flight`] scopes) open on this thread: only the
    /// outermost one counts in [`ACTIVE`].
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Attaches in flight from Rust (see [`try_attach`]).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Set once the interpreter has begun to shut down.
static EXITING: AtomicBool = AtomicBool::new(false);

/// How long [`begin_exit`] waits for attaches in flight.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Mark the calling thread as created by plughost, so it keeps its Python
/// thread state between calls (no per-call allocation of one).
///
/// plughost's own tokio runtime calls this from `on_thread_start`; a Rust
/// service that drives hosts from its own runtime may do the same
/// (`Builder::on_thread_start(plughost::runtime::thread_started)`) for the
/// same saving. Never call it on a thread Python created.
pub fn thread_started() {
    MANAGED.with(|m| m.set(true));
}

/// Whether the calling thread was marked by [`thread_started`]: a thread a
/// tokio runtime made (a worker or a blocking thread), never the one a
/// current-thread runtime's `block_on` runs on, so a wait on it may go
/// through `block_in_place` when the runtime is a multi-thread one.
pub fn is_runtime_thread() -> bool {
    MANAGED.with(Cell::get)
}

/// The interpreter is shutting down (or gone): attaching is not possible.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("the Python interpreter is shutting down")]
pub struct Exiting;

/// Run `f` attached to the interpreter; see the module docs for which
/// threads keep their thread state. Use [`try_attach`] on paths that may
/// run while the interpreter exits (completions, drops, tokio threads).
#[inline]
pub fn attach<F, R>(f: F) -> R
where
    F: for<'py> FnOnce(Python<'py>) -> R,
{
    keep_thread_state();
    Python::attach(f)
}

/// [`attach`], unless the interpreter is shutting down.
#[inline]
pub fn try_attach<F, R>(f: F) -> Result<R, Exiting>
where
    F: for<'py> FnOnce(Python<'py>) -> R,
{
    let _active = InFlight::enter();
    if EXITING.load(Ordering::SeqCst) {
        return Err(Exiting);
    }
    keep_thread_state();
    Ok(Python::attach(f))
}

/// Run `f`, which attaches several times in a row (a tool call's hooks and
/// handler), counted once as in flight for [`begin_exit`]: the attaches
/// inside then count nothing more, instead of two locked instructions
/// each. Attaching inside is refused while exiting, as ever; `f` should
/// not block for long (the exit waits for it, up to its grace).
pub fn in_flight<R>(f: impl FnOnce() -> R) -> R {
    let _active = InFlight::enter();
    f()
}

/// The calling thread counted in [`ACTIVE`] while alive (the outermost of
/// nested ones only: one inside another begins and ends within it).
struct InFlight;

impl InFlight {
    fn enter() -> InFlight {
        let depth = DEPTH.with(|d| d.replace(d.get() + 1));
        if depth == 0 {
            ACTIVE.fetch_add(1, Ordering::SeqCst);
        }
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let depth = DEPTH.with(|d| {
            d.set(d.get() - 1);
            d.get()
        });
        if depth == 0 {
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Run `f` with the GIL released (`py.detach`), for a blocking wait on a
/// thread Python owns. Should the interpreter begin to shut down meanwhile,
/// the thread never takes the GIL back: it parks until the process ends
/// (3.11 would end it with `pthread_exit` through our frames, aborting the
/// process; 3.14 parks such threads the same way).
pub fn detach_blocking<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    py.detach(|| {
        let result = f();
        while exiting() {
            std::thread::park_timeout(Duration::from_secs(3600));
        }
        result
    })
}

/// Run `f`, a wait for another thread, with the GIL released when this
/// thread holds it. A thread that waits holding the GIL stalls every
/// thread that needs it meanwhile, the one that would answer included: a
/// blocking plughost call made from Python (its first step runs with the
/// GIL held) waited on a worker's reply whose reader was itself waiting
/// for the GIL to wake an asyncio future, so neither went on until a
/// bound ran out. Without the GIL, or once the interpreter began to exit
/// (taking it back then could end the thread), `f` is run as it is.
///
/// # Safety
///
/// `f` must not use a Python reference it captured (a `Bound`, a
/// `Python` token): it runs without the GIL, and nothing checks what it
/// holds. Attaching afresh inside (`Python::attach`) is sound: pyo3
/// counts this thread as detached meanwhile.
pub(crate) unsafe fn gil_released<T>(f: impl FnOnce() -> T) -> T {
    if !holds_gil() || exiting() {
        return f();
    }
    // SAFETY: this thread holds the GIL (checked just above).
    let py = unsafe { Python::assume_attached() };
    let wait = InPlace(f);
    py.detach(move || {
        let result = wait.run();
        // Began to exit meanwhile: never take the GIL back (as
        // `detach_blocking`).
        while exiting() {
            std::thread::park_timeout(Duration::from_secs(3600));
        }
        InPlace(result)
    })
    .0
}

/// A wait (or its result) run in place by [`gil_released`].
struct InPlace<T>(T);

// SAFETY: `Python::detach` asks for `Send` only to keep Python references
// out of code run without the GIL. `gil_released` runs the closure right
// there, on the calling thread, and its (unsafe) contract has its callers
// pass only code that touches no Python object.
unsafe impl<T> Send for InPlace<T> {}

impl<T, F: FnOnce() -> T> InPlace<F> {
    fn run(self) -> T {
        (self.0)()
    }
}

/// Whether the interpreter has begun to shut down.
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Called from Python's `atexit` (the GIL held): refuse new attaches, then
/// give the ones in flight up to `EXIT_GRACE` to finish, with the GIL
/// released so they can.
pub fn begin_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let started = Instant::now();
        while ACTIVE.load(Ordering::SeqCst) > 0 && started.elapsed() < EXIT_GRACE {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// A thread state created for a plughost thread and kept, detached, until
/// the thread ends.
struct KeptThreadState {
    gil_state: ffi::PyGILState_STATE,
    saved: *mut ffi::PyThreadState,
}

impl Drop for KeptThreadState {
    fn drop(&mut self) {
        // The thread is ending. Give its thread state back, unless the
        // interpreter is exiting or gone (then it owns and frees every
        // thread state itself, and taking the GIL could end this thread).
        // Counted as an attach in flight, so `begin_exit` waits for it.
        let _active = InFlight::enter();
        if exiting() {
            return;
        }
        // SAFETY: `saved` is this thread's own state, detached by
        // `PyEval_SaveThread` in `keep_thread_state` and never attached since
        // (every later attach on this thread went through PyGILState, which
        // restores and saves it again in pairs). Restoring it and releasing
        // the matching `PyGILState_Ensure` deletes it.
        unsafe {
            if ffi::Py_IsInitialized() != 0 {
                ffi::PyEval_RestoreThread(self.saved);
                ffi::PyGILState_Release(self.gil_state);
            }
        }
    }
}

fn keep_thread_state() {
    if !MANAGED.with(Cell::get) {
        return;
    }
    KEPT.with(|kept| {
        if kept.borrow().is_some() {
            return;
        }
        // SAFETY: these calls only read interpreter state or act on this
        // thread's own state. We create one only when the interpreter is up
        // and this thread has none (not nested inside an attach, not a
        // thread Python knows); `PyGILState_Ensure` then creates it and takes
        // the GIL, and `PyEval_SaveThread` releases the GIL while keeping the
        // state registered for this thread, so later `PyGILState_Ensure`
        // calls here reuse it.
        unsafe {
            if ffi::Py_IsInitialized() == 0 || !ffi::PyGILState_GetThisThreadState().is_null() {
                return;
            }
            let gil_state = ffi::PyGILState_Ensure();
            let saved = ffi::PyEval_SaveThread();
            *kept.borrow_mut() = Some(KeptThreadState { gil_state, saved });
        }
    });
}

/// How long past its limit a handed-off call may take to end once its
/// `TimeoutError` was raised (Python code that loops ends within a few
/// milliseconds) before the caller abandons it.
const ABANDON_GRACE: Duration = Duration::from_millis(250);

/// How long each side of a hand-off spins before it parks: the caller for
/// the answer (most hooks answer within it), the runner for the next call
/// (hooks come in runs: pre, post, transform). Spinning saves the two
/// thread wake-ups a hand-off would otherwise cost.
const SPIN: Duration = Duration::from_micros(50);

type Job = Box<dyn FnOnce() + Send>;

/// The thread that runs the calling thread's bounded calls
/// ([`call_abandonable`]); one per calling thread, made on first use and
/// ended when the calling thread ends (its channel closes).
struct Runner {
    jobs: std::sync::mpsc::Sender<Job>,
    /// The runner's Python thread id, for the `TimeoutError`.
    thread: std::os::raw::c_ulong,
}

thread_local! {
    static RUNNER: RefCell<Option<Runner>> = const { RefCell::new(None) };
}

/// Receive from `rx`, spinning for up to [`SPIN`] before blocking until `deadline`.
fn recv_spinning<T>(
    rx: &std::sync::mpsc::Receiver<T>,
    deadline: Option<Instant>,
) -> Result<T, std::sync::mpsc::RecvTimeoutError> {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
    let started = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(v) => return Ok(v),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {}
        }
        if started.elapsed() > SPIN {
            break;
        }
        // Yield, not spin: on a busy machine the other side may need this core.
        std::thread::yield_now();
    }
    match deadline {
        Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
    }
}

impl Runner {
    fn start() -> std::io::Result<Runner> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let (id_tx, id_rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("plughost-call".into())
            .spawn(move || {
                thread_started();
                // SAFETY: reads the calling thread's identity only.
                let _ = id_tx.send(unsafe { ffi::PyThread_get_thread_ident() });
                while let Ok(job) = recv_spinning(&queue, None) {
                    job();
                }
            })?;
        let thread = id_rx
            .recv()
            .map_err(|_| std::io::Error::other("the call runner did not start"))?;
        Ok(Runner { jobs, thread })
    }
}

/// A sync call the caller must be able to walk away from: `f` runs on a
/// runner thread (kept per calling thread, with its Python thread state;
/// both sides spin briefly, so a call that answers at once costs no thread
/// wake-up). Past `limit` a `TimeoutError` is raised in it (ending Python
/// code that loops); `None` when it still has not returned a short grace
/// later: blocked in C (`time.sleep`, a blocking read), it is abandoned
/// there with its runner (the next call starts a new one), and the caller
/// goes on. A panic in `f` is resumed in the caller.
///
/// Why a thread: a call blocked in C cannot be ended in-process, and the
/// caller's stack (an agent turn) cannot move off the thread it blocks;
/// only a call made elsewhere can be left behind.
pub fn call_abandonable<T, F>(limit: Duration, f: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let fired = std::sync::Arc::new(AtomicBool::new(false));
    let raised = fired.clone();
    let job: Job = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        if raised.load(Ordering::SeqCst) {
            // SAFETY: with the GIL held; a null exception withdraws a
            // `TimeoutError` raised too late to matter, on this thread.
            let _ = try_attach(|_py| unsafe {
                ffi::PyThreadState_SetAsyncExc(
                    ffi::PyThread_get_thread_ident() as _,
                    std::ptr::null_mut(),
                )
            });
        }
        let _ = tx.send(r);
    });
    let runner = RUNNER.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            *slot = Runner::start().ok();
        }
        match slot.as_ref() {
            Some(runner) => runner
                .jobs
                .send(job)
                .map(|()| runner.thread)
                .map_err(|e| e.0),
            None => Err(job),
        }
    });
    let thread = match runner {
        Ok(thread) => thread,
        Err(job) => {
            // No runner could be started (or it is gone): run here,
            // watched as before, rather than not at all.
            RUNNER.with(|slot| slot.borrow_mut().take());
            let watch = super::watchdog::watch(limit);
            job();
            drop(watch);
            return match rx.try_recv() {
                Ok(Ok(v)) => Some(v),
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(_) => None,
            };
        }
    };
    let started = Instant::now();
    let mut answer = recv_spinning(&rx, Some(started + limit));
    if answer.is_err() {
        fired.store(true, Ordering::SeqCst);
        // SAFETY: with the GIL held; PyExc_TimeoutError is a static type
        // object and SetAsyncExc takes its own reference.
        let _ = try_attach(|_py| unsafe {
            ffi::PyThreadState_SetAsyncExc(thread as _, ffi::PyExc_TimeoutError)
        });
        answer = rx.recv_timeout(ABANDON_GRACE.min(limit));
    }
    match answer {
        Ok(Ok(v)) => Some(v),
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => {
            // Leave the runner with its call; dropping its channel ends it
            // once the call returns, if ever.
            RUNNER.with(|slot| slot.borrow_mut().take());
            None
        }
    }
}

/// Whether the calling thread holds the GIL (then a call handed to another
/// thread could not take it: run such calls in place).
pub fn holds_gil() -> bool {
    // SAFETY: reads this thread's own state; safe whether or not the
    // interpreter is initialized (then it answers 0).
    unsafe { ffi::Py_IsInitialized() != 0 && this_thread_attached() }
}

/// Whether this thread holds the GIL, by `PyGILState_Check`. Not by the
/// current thread state: up to CPython 3.11 that is the GIL holder's,
/// whichever thread asks (a process-wide variable, thread-local from
/// 3.12), so it would say yes on every thread while any one holds the
/// GIL. `PyGILState_Check` answers yes unconditionally once a
/// subinterpreter exists; plughost makes none.
///
/// # Safety
///
/// The interpreter is initialized.
unsafe fn this_thread_attached() -> bool {
    gil_state_check() != 0
}

#[cfg(not(Py_LIMITED_API))]
use ffi::PyGILState_Check as gil_state_check;

// Under the stable ABI (a worker on another Python, issue 47) pyo3 does
// not declare `PyGILState_Check`, which every CPython from 3.4 exports
// with this signature (it is outside the limited API, not absent).
#[cfg(Py_LIMITED_API)]
extern "C" {
    #[link_name = "PyGILState_Check"]
    fn gil_state_check() -> std::os::raw::c_int;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one hand-off costs (printed; `cargo test --lib threads -- --nocapture`),
    /// and that a call that never returns is abandoned at its limit.
    #[test]
    fn a_call_is_handed_off_and_abandoned_past_its_limit() {
        Python::initialize();
        let n = 5_000u32;
        for _ in 0..100 {
            assert_eq!(call_abandonable(Duration::from_secs(5), || 7), Some(7));
        }
        let started = Instant::now();
        for _ in 0..n {
            call_abandonable(Duration::from_secs(5), || 7);
        }
        println!("hand-off: {:?} per call", started.elapsed() / n);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let left = call_abandonable(Duration::from_millis(50), move || rx.recv().is_ok());
        assert_eq!(left, None);
        assert_eq!(call_abandonable(Duration::from_secs(5), || 8), Some(8));
        drop(tx);
    }
}
