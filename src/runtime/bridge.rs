//! Awaiting Python awaitables from Rust without holding the GIL.
//!
//! [`resolve`] is the one entry that starts an awaitable a plugin returned.
//! It runs it one of two ways:
//!
//! - **Inline**, when a plughost awaitable is being awaited on this thread
//!   (an [`InlineDriver`] is active: `await host.acall_tool(...)`): the
//!   coroutine is driven by the caller's own asyncio task, exactly as
//!   `await coro` would drive it: its first step runs now, and whatever it
//!   suspends on is handed up through the driver to the caller's task, which
//!   resumes it. No thread hop, no extra task; `current_task()` is the
//!   caller's, as under Flowly.
//! - **On the runtime's loop** otherwise (blocking calls, the agent loop on
//!   tokio): the coroutine becomes a task of plughost's asyncio loop (a
//!   daemon thread), with its first step taken here, eagerly; a completion
//!   callback, attached before the loop can see the task, feeds a oneshot
//!   channel that wakes the Rust future. The loop is supervised: a plugin's
//!   `SystemExit` fails only its call, and if the loop thread ever ends, the
//!   calls waiting on it fail at once instead of hanging.
//!
//! The GIL is never held while waiting. Dropping a pending future cancels
//! (loop) or closes (inline) the Python coroutine.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};

use pyo3::ffi;
use pyo3::prelude::*;
use tokio::sync::{oneshot, Notify};

use crate::runtime::{pair, runtime, try_attach};

/// What awaiting a Python awaitable gave: its result or its exception.
pub type Outcome = Result<Py<PyAny>, PyErr>;

/// An awaitable's result: ready now, or pending.
pub enum Awaited {
    Ready(Outcome),
    Pending(PendingAwait),
}

/// `true` when `obj` must be awaited (a coroutine or anything with `__await__`).
#[inline]
pub fn is_awaitable(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object (we hold a bound reference, so the GIL
    // is held); its type object outlives it, and `tp_as_async` is either
    // null or points to the type's static slot table. Reading the
    // `am_await` slot is what `await` itself does, and avoids an attribute
    // lookup that raises on every non-awaitable.
    #[cfg(not(Py_LIMITED_API))]
    unsafe {
        let ty = ffi::Py_TYPE(obj.as_ptr());
        let slots = (*ty).tp_as_async;
        !slots.is_null() && (*slots).am_await.is_some()
    }
    // The stable ABI (a worker on another Python, issue 47) hides the type
    // object's layout: the slot is read through `PyType_GetSlot`, which
    // takes static types too from 3.10 (the abi3 floor).
    // SAFETY: as above; `Py_am_await` is a valid slot id, so a type
    // without the slot gives null and sets no error.
    #[cfg(Py_LIMITED_API)]
    unsafe {
        let ty = ffi::Py_TYPE(obj.as_ptr());
        !ffi::PyType_GetSlot(ty, ffi::Py_am_await).is_null()
    }
}

/// Await `obj` if it is awaitable, else hand it back. The returned future
/// needs no GIL to be polled from outside Python.
pub fn resolve(py: Python<'_>, obj: Bound<'_, PyAny>) -> Awaited {
    if !is_awaitable(&obj) {
        return Awaited::Ready(Ok(obj.unbind()));
    }
    if InlineDriver::active() {
        start_inline(py, obj)
    } else {
        start_on_loop(py, obj)
    }
}

/// A pending awaitable: on the runtime's loop, or driven inline.
pub enum PendingAwait {
    Loop(LoopTask),
    Inline(InlineTask),
}

impl Future for PendingAwait {
    type Output = Outcome;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self.get_mut() {
            PendingAwait::Loop(t) => Pin::new(t).poll(cx),
            PendingAwait::Inline(t) => Pin::new(t).poll(cx),
        }
    }
}

// ── On the runtime's loop ─────────────────────────────────────────

/// How many times the runtime's asyncio loop thread has ended (see `loop_ended`).
static LOOPS_ENDED: AtomicU64 = AtomicU64::new(0);
static LOOP_ENDED_NOTIFY: Notify = Notify::const_new();

/// The loop thread ended: fail every call waiting on it. A later call
/// starts a fresh loop.
pub(crate) fn loop_ended() {
    LOOPS_ENDED.fetch_add(1, Ordering::SeqCst);
    LOOP_ENDED_NOTIFY.notify_waiters();
}

/// Completion callback handed to the asyncio task; sends its outcome to Rust.
#[pyclass(module = "_plughost_native", frozen)]
pub struct Completion {
    sender: Mutex<Option<oneshot::Sender<Outcome>>>,
}

#[pymethods]
impl Completion {
    fn __call__(&self, future: &Bound<'_, PyAny>) {
        let outcome = future.call_method0("result").map(Bound::unbind);
        let sender = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(tx) = sender {
            let _ = tx.send(outcome);
        }
    }
}

fn start_on_loop(py: Python<'_>, awaitable: Bound<'_, PyAny>) -> Awaited {
    let rt = runtime();
    let (tx, rx) = oneshot::channel();
    let completion = match Py::new(
        py,
        Completion {
            sender: Mutex::new(Some(tx)),
        },
    ) {
        Ok(c) => c,
        Err(e) => return Awaited::Ready(Err(e)),
    };
    let generation = LOOPS_ENDED.load(Ordering::SeqCst);
    match rt
        .start
        .bind(py)
        .call1((awaitable, completion))
        .and_then(pair)
    {
        Err(e) => Awaited::Ready(Err(e)),
        Ok((true, value)) => Awaited::Ready(Ok(value.unbind())),
        Ok((false, task)) => Awaited::Pending(PendingAwait::Loop(LoopTask {
            rx,
            task: Some(task.unbind()),
            generation,
            loop_gone: Box::pin(LOOP_ENDED_NOTIFY.notified()),
        })),
    }
}

/// A task running on the runtime's asyncio loop; resolves to its outcome.
pub struct LoopTask {
    rx: oneshot::Receiver<Outcome>,
    task: Option<Py<PyAny>>,
    /// [`LOOPS_ENDED`] when the task started: a change means its loop is gone.
    generation: u64,
    loop_gone: Pin<Box<tokio::sync::futures::Notified<'static>>>,
}

impl Future for LoopTask {
    type Output = Outcome;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        if let Poll::Ready(r) = Pin::new(&mut self.rx).poll(cx) {
            self.task = None;
            return Poll::Ready(r.unwrap_or_else(|_| {
                Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the asyncio loop dropped the task before it finished",
                ))
            }));
        }
        let ended = self.loop_gone.as_mut().poll(cx).is_ready();
        if ended || LOOPS_ENDED.load(Ordering::SeqCst) != self.generation {
            self.task = None;
            return Poll::Ready(Err(pyo3::exceptions::PyRuntimeError::new_err(
                "plughost's asyncio loop stopped while the call was waiting on it",
            )));
        }
        Poll::Pending
    }
}

impl Drop for LoopTask {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Abandoned before it finished (a timeout, a cancelled turn):
            // cancel it on its loop.
            let _ = try_attach(|py| {
                if let Err(e) = runtime().cancel.bind(py).call1((task,)) {
                    tracing::debug!("could not cancel an abandoned Python task: {e}");
                }
            });
        }
    }
}

// ── Inline, driven by the caller's task ───────────────────────────

/// How the driver resumes the awaitable it delegated to.
pub enum Resume {
    /// `send(value)`: what the awaited thing produced.
    Send(Py<PyAny>),
    /// `throw(exc)`: e.g. the caller's task was cancelled.
    Throw(PyErr),
}

#[derive(Default)]
struct DriverSlot {
    /// Set by an [`InlineTask`] that suspended: what to yield to the caller's task.
    yielded: Option<Py<PyAny>>,
    /// Set by the driver before it polls again: how to resume that task.
    resume: Option<Resume>,
    /// Set when a thrown `CancelledError` came back out of the task: the
    /// caller's cancellation went through, so the whole call is cancelled.
    cancelled: bool,
}

thread_local! {
    static DRIVER: RefCell<Option<DriverSlot>> = const { RefCell::new(None) };
}

/// Marks "a plughost awaitable is polling its future on this thread, inside
/// the caller's asyncio task" for the duration of one poll. Python
/// coroutines started meanwhile are driven inline (see the module docs).
/// Nested drivers (a plugin awaiting another plughost call) stack.
pub struct InlineDriver {
    /// What to put back when this driver ends: `Some(outer)` until then.
    outer: Option<Option<DriverSlot>>,
}

impl InlineDriver {
    /// Become the active driver, handing the delegated task `resume`.
    pub fn enter(resume: Option<Resume>) -> InlineDriver {
        let outer = DRIVER.with(|d| {
            d.borrow_mut().replace(DriverSlot {
                yielded: None,
                resume,
                cancelled: false,
            })
        });
        InlineDriver { outer: Some(outer) }
    }

    /// Stop driving: what an inline task asked to yield, if any, and
    /// whether a cancellation thrown into it went through.
    pub fn leave(mut self) -> (Option<Py<PyAny>>, bool) {
        let outer = self.outer.take().flatten();
        DRIVER
            .with(|d| std::mem::replace(&mut *d.borrow_mut(), outer))
            .map(|slot| (slot.yielded, slot.cancelled))
            .unwrap_or((None, false))
    }

    fn note_cancelled() {
        DRIVER.with(|d| {
            if let Some(slot) = d.borrow_mut().as_mut() {
                slot.cancelled = true;
            }
        });
    }

    /// Run `f` with no driver active: a blocking call made from inside an
    /// inline step runs its coroutines on the runtime's loop, not inline
    /// (nothing would resume them while this thread blocks).
    pub fn suspended<R>(f: impl FnOnce() -> R) -> R {
        let saved = DRIVER.with(|d| d.borrow_mut().take());
        struct Restore(Option<DriverSlot>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let saved = self.0.take();
                DRIVER.with(|d| *d.borrow_mut() = saved);
            }
        }
        let _restore = Restore(saved);
        f()
    }

    fn active() -> bool {
        DRIVER.with(|d| d.borrow().is_some())
    }

    fn take_resume() -> Option<Resume> {
        DRIVER.with(|d| d.borrow_mut().as_mut().and_then(|s| s.resume.take()))
    }

    fn hand_up(yielded: Py<PyAny>) {
        DRIVER.with(|d| {
            if let Some(slot) = d.borrow_mut().as_mut() {
                slot.yielded = Some(yielded);
            }
        });
    }
}

impl Drop for InlineDriver {
    fn drop(&mut self) {
        // `leave` was not called (a panic): restore the outer driver, or
        // none, so later calls on this thread are not taken for inline ones.
        if let Some(outer) = self.outer.take() {
            DRIVER.with(|d| *d.borrow_mut() = outer);
        }
    }
}

/// A Python awaitable being driven inline; see the module docs.
pub struct InlineTask {
    /// The awaitable's iterator (a coroutine, or what `__await__` returned).
    iter: Option<Py<PyAny>>,
    /// What its first step yielded, not yet handed up.
    first: Option<Py<PyAny>>,
}

fn start_inline(py: Python<'_>, obj: Bound<'_, PyAny>) -> Awaited {
    // SAFETY: `obj` is a live object and the GIL is held.
    #[cfg(not(Py_LIMITED_API))]
    let is_coroutine = unsafe { ffi::PyCoro_CheckExact(obj.as_ptr()) } != 0;
    // Under the stable ABI a coroutine goes through its `__await__` too
    // (its wrapper iterator steps it the same way).
    #[cfg(Py_LIMITED_API)]
    let is_coroutine = false;
    let iter = if is_coroutine {
        obj
    } else {
        match obj.call_method0("__await__") {
            Ok(it) => it,
            Err(e) => return Awaited::Ready(Err(e)),
        }
    };
    match step(py, &iter, Resume::Send(py.None())) {
        Step::Returned(r) => Awaited::Ready(r),
        Step::Yielded(y) => Awaited::Pending(PendingAwait::Inline(InlineTask {
            iter: Some(iter.unbind()),
            first: Some(y),
        })),
    }
}

enum Step {
    Returned(Outcome),
    Yielded(Py<PyAny>),
}

/// Resume `iter` once.
fn step(py: Python<'_>, iter: &Bound<'_, PyAny>, resume: Resume) -> Step {
    match resume {
        Resume::Send(value) => {
            let mut result: *mut ffi::PyObject = std::ptr::null_mut();
            // SAFETY: the GIL is held; `iter` and `value` are live objects;
            // `PyIter_Send` stores a new (owned) reference in `result` for
            // both PYGEN_RETURN and PYGEN_NEXT, and on PYGEN_ERROR sets an
            // exception that `PyErr::fetch` takes.
            unsafe {
                match ffi::PyIter_Send(iter.as_ptr(), value.as_ptr(), &mut result) {
                    ffi::PySendResult::PYGEN_RETURN => {
                        Step::Returned(Ok(Bound::from_owned_ptr(py, result).unbind()))
                    }
                    ffi::PySendResult::PYGEN_NEXT => {
                        Step::Yielded(Bound::from_owned_ptr(py, result).unbind())
                    }
                    ffi::PySendResult::PYGEN_ERROR => Step::Returned(Err(PyErr::fetch(py))),
                }
            }
        }
        Resume::Throw(exc) => {
            if !iter.hasattr("throw").unwrap_or(false) {
                return Step::Returned(Err(exc));
            }
            match iter.call_method1("throw", (exc.into_value(py),)) {
                Ok(y) => Step::Yielded(y.unbind()),
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => {
                    let value = e
                        .value(py)
                        .getattr("value")
                        .map(Bound::unbind)
                        .unwrap_or_else(|_| py.None());
                    Step::Returned(Ok(value))
                }
                Err(e) => Step::Returned(Err(e)),
            }
        }
    }
}

impl Future for InlineTask {
    type Output = Outcome;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Outcome> {
        if let Some(first) = self.first.take() {
            InlineDriver::hand_up(first);
            return Poll::Pending;
        }
        let Some(resume) = InlineDriver::take_resume() else {
            // Polled without being resumed: it is still waiting on what it
            // yielded, which the caller's task will resume it from.
            return Poll::Pending;
        };
        let Some(iter) = self.iter.as_ref() else {
            return Poll::Ready(Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a finished awaitable was polled again",
            )));
        };
        let stepped = try_attach(|py| {
            let cancelling = matches!(&resume, Resume::Throw(e)
                if e.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py));
            let stepped = step(py, iter.bind(py), resume);
            if cancelling {
                if let Step::Returned(Err(e)) = &stepped {
                    if e.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) {
                        InlineDriver::note_cancelled();
                    }
                }
            }
            stepped
        });
        match stepped {
            Err(exiting) => Poll::Ready(Err(pyo3::exceptions::PyRuntimeError::new_err(
                exiting.to_string(),
            ))),
            Ok(Step::Yielded(y)) => {
                InlineDriver::hand_up(y);
                Poll::Pending
            }
            Ok(Step::Returned(r)) => {
                self.iter = None;
                Poll::Ready(r)
            }
        }
    }
}

impl Drop for InlineTask {
    fn drop(&mut self) {
        if let Some(iter) = self.iter.take() {
            // Given up on while suspended (the caller was cancelled): close
            // the coroutine so its `finally` blocks run.
            let _ = try_attach(|py| {
                let iter = iter.bind(py);
                if iter.hasattr("close").unwrap_or(false) {
                    if let Err(e) = iter.call_method0("close") {
                        tracing::debug!("closing an abandoned plugin coroutine raised: {e}");
                    }
                }
            });
        }
    }
}
