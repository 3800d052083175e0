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
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    let _active = ActiveGuard;
    if EXITING.load(Ordering::SeqCst) {
        return Err(Exiting);
    }
    keep_thread_state();
    Ok(Python::attach(f))
}

struct ActiveGuard;

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
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

/// Whether the interpreter has begun to shut down.
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Called from Python's `atexit` (the GIL held): refuse new attaches, then
/// give the ones in flight up to [`EXIT_GRACE`] to finish, with the GIL
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
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        let _active = ActiveGuard;
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

/// A sync Python call that must not outlive `limit` (a sync hook under
/// `--hook-timeout`): past it, a `TimeoutError` is raised in the thread
/// running it, which ends Python code that loops or spins (the exception
/// is seen between two bytecodes). A call blocked inside C for good (one
/// long `time.sleep`, a blocking read) cannot be stopped in-process: that
/// is what isolation is for (`docs/reliability.md`). Dropped when the call
/// returns; an exception raised too late to matter is withdrawn then.
pub struct Watch {
    id: u64,
}

/// Start watching the calling thread's Python call; see [`Watch`].
pub fn watch(limit: Duration) -> Watch {
    // SAFETY: reads the calling thread's identity; no interpreter state is touched.
    let thread = unsafe { ffi::PyThread_get_thread_ident() };
    let dog = watchdog();
    let mut state = dog.state.lock().unwrap_or_else(|e| e.into_inner());
    state.next += 1;
    let id = state.next;
    state.watched.insert(
        id,
        Watched {
            deadline: Instant::now() + limit,
            thread,
            fired: false,
        },
    );
    dog.wake.notify_one();
    Watch { id }
}

impl Watch {
    /// Whether the call went past its limit (the `TimeoutError` was raised).
    pub fn fired(&self) -> bool {
        let dog = watchdog();
        let state = dog.state.lock().unwrap_or_else(|e| e.into_inner());
        state.watched.get(&self.id).is_some_and(|w| w.fired)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let dog = watchdog();
        let watched = dog
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .watched
            .remove(&self.id);
        if let Some(w) = watched.filter(|w| w.fired) {
            // SAFETY: with the GIL held; a null exception withdraws one not yet raised.
            let _ = try_attach(|_py| unsafe {
                ffi::PyThreadState_SetAsyncExc(w.thread as _, std::ptr::null_mut())
            });
        }
    }
}

struct Watched {
    deadline: Instant,
    thread: std::os::raw::c_ulong,
    fired: bool,
}

#[derive(Default)]
struct WatchState {
    next: u64,
    watched: std::collections::HashMap<u64, Watched>,
}

/// The process's one watchdog thread and what it watches (calls, not host state).
struct Watchdog {
    state: std::sync::Mutex<WatchState>,
    wake: std::sync::Condvar,
}

fn watchdog() -> &'static Watchdog {
    static DOG: std::sync::OnceLock<&'static Watchdog> = std::sync::OnceLock::new();
    DOG.get_or_init(|| {
        let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            state: std::sync::Mutex::new(WatchState::default()),
            wake: std::sync::Condvar::new(),
        }));
        let _ = std::thread::Builder::new()
            .name("plughost-watchdog".into())
            .spawn(move || dog.run());
        dog
    })
}

impl Watchdog {
    fn run(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            let mut next: Option<Instant> = None;
            for w in state.watched.values_mut().filter(|w| !w.fired) {
                if w.deadline <= now {
                    w.fired = true;
                    due.push(w.thread);
                } else {
                    next = Some(next.map_or(w.deadline, |n| n.min(w.deadline)));
                }
            }
            if !due.is_empty() {
                drop(state);
                let _ = try_attach(|_py| {
                    for thread in due {
                        // SAFETY: with the GIL held; PyExc_TimeoutError is a
                        // static type object, and SetAsyncExc takes its own reference.
                        unsafe {
                            ffi::PyThreadState_SetAsyncExc(thread as _, ffi::PyExc_TimeoutError)
                        };
                    }
                });
                state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            state = match next {
                Some(at) => {
                    let wait = at.saturating_duration_since(now);
                    self.wake
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.wake.wait(state).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}
