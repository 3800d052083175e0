//! `plughost.Call`: the awaitable the Python API returns for async work.
//!
//! It does nothing until awaited. Each step (`send`/`throw` from the
//! caller's asyncio task) polls the Rust future right there, on the
//! caller's thread, inside the caller's task, as an [`InlineDriver`]: a
//! plugin coroutine the future starts is driven by the caller's task itself
//! (what it awaits is yielded straight up to that task), so a call that
//! never suspends finishes in its first step and one that does costs no
//! thread hop. When the future waits on something outside Python (a timer,
//! a tokio task), the step yields a future of the caller's loop that the
//! Rust waker resolves.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
#[cfg(not(Py_LIMITED_API))]
use pyo3::ffi;
use pyo3::prelude::*;

use crate::runtime::bridge::{InlineDriver, Resume};
use crate::runtime::{runtime, try_attach};

/// What a finished call hands back to Python.
pub enum Reply {
    Text(String),
    /// A JSON document, handed over as plain dicts and lists (a turn's
    /// report, in the shape `plughost run --json` prints).
    Json(serde_json::Value),
    Nothing,
}

impl Reply {
    /// The value the `await` evaluates to.
    fn into_value(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match self {
            Reply::Text(t) => pyo3::types::PyString::new(py, &t).into_any().unbind(),
            Reply::Json(v) => pythonize::pythonize(py, &v)?.unbind(),
            Reply::Nothing => py.None(),
        })
    }
}

/// What one step of a call came to.
enum Stepped {
    /// Suspend the awaiting task on this object.
    Yield(Py<PyAny>),
    /// The call is done: the `await` evaluates to this.
    Return(Py<PyAny>),
}

impl Stepped {
    /// As the iterator protocol has it: a yield, or `StopIteration(value)`.
    ///
    /// The error is raised the way CPython's own coroutines raise it (the
    /// value itself, not an argument tuple, and not normalised): the
    /// interpreter then takes the value without making an exception
    /// object. A value is never a tuple (`pythonize` makes JSON arrays
    /// lists), which CPython would take as the arguments.
    fn into_iteration(self) -> PyResult<Py<PyAny>> {
        match self {
            Stepped::Yield(wait) => Ok(wait),
            Stepped::Return(value) => Err(PyStopIteration::new_err(value)),
        }
    }
}

/// The Rust side of a call.
pub type CallFuture = Pin<Box<dyn Future<Output = PyResult<Reply>> + Send + 'static>>;

struct State {
    future: Option<CallFuture>,
    /// The last step yielded what a plugin coroutine awaits (not ours).
    delegated: bool,
    waker: Option<Arc<LoopWaker>>,
}

/// An awaitable plughost call (see the module docs).
#[pyclass(module = "plughost", name = "Call", frozen)]
pub struct PyCall {
    state: Mutex<State>,
}

impl PyCall {
    pub fn new(future: CallFuture) -> PyCall {
        PyCall {
            state: Mutex::new(State {
                future: Some(future),
                delegated: false,
                waker: None,
            }),
        }
    }

    /// One step: resume what we delegated to (or just poll), then yield
    /// what to wait on, or the call's value. Counted in flight once for
    /// the shutdown, not once for each hook and handler it attaches for.
    fn step(&self, py: Python<'_>, resume: Resume) -> PyResult<Stepped> {
        crate::runtime::threads::in_flight(|| self.step_counted(py, resume))
    }

    fn step_counted(&self, py: Python<'_>, resume: Resume) -> PyResult<Stepped> {
        let Ok(mut state) = self.state.try_lock() else {
            return Err(PyRuntimeError::new_err(
                "this plughost call is being awaited somewhere else at the same time",
            ));
        };
        if state.future.is_none() {
            return Err(PyRuntimeError::new_err(
                "cannot reuse an already awaited plughost call",
            ));
        }
        let mut resume = if state.delegated {
            Some(resume)
        } else {
            match resume {
                // Our own wait was interrupted (the caller's task was
                // cancelled): give up on the call, which cancels its work.
                Resume::Throw(exc) => {
                    state.future = None;
                    return Err(exc);
                }
                Resume::Send(_) => None,
            }
        };
        let rt = runtime();
        loop {
            // No waker until one is needed: most calls finish in their
            // first step, or wait on what they delegate to the caller's task.
            let waker = state.waker.clone();
            let future = state.future.as_mut().expect("checked above");
            let driver = InlineDriver::enter(resume.take());
            let polled = {
                let _tokio = rt.tokio().enter();
                match &waker {
                    Some(w) => {
                        let w = Waker::from(w.clone());
                        future.as_mut().poll(&mut Context::from_waker(&w))
                    }
                    None => future
                        .as_mut()
                        .poll(&mut Context::from_waker(Waker::noop())),
                }
            };
            let (yielded, cancelled) = driver.leave();
            if cancelled {
                // The caller's task was cancelled and the plugin coroutine let
                // it through: the call is cancelled, not a failed tool call.
                state.future = None;
                state.delegated = false;
                return Err(pyo3::exceptions::asyncio::CancelledError::new_err(()));
            }
            match polled {
                Poll::Ready(result) => {
                    state.future = None;
                    state.delegated = false;
                    return Ok(Stepped::Return(result?.into_value(py)?));
                }
                Poll::Pending => {
                    if let Some(y) = yielded {
                        state.delegated = true;
                        return Ok(Stepped::Yield(y));
                    }
                    state.delegated = false;
                    let Some(waker) = waker else {
                        // Polled without a waker: poll again with one.
                        state.waker = Some(Arc::new(LoopWaker::default()));
                        continue;
                    };
                    match waker.arm(py)? {
                        Some(wait) => return Ok(Stepped::Yield(wait)),
                        None => continue, // woken while polling: poll again
                    }
                }
            }
        }
    }
}

#[pymethods]
impl PyCall {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// `Call[str]` in annotations evaluated at run time.
    #[classmethod]
    fn __class_getitem__<'py>(
        cls: &Bound<'py, pyo3::types::PyType>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        cls.py()
            .import("types")?
            .getattr("GenericAlias")?
            .call1((cls, item))
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.step(py, Resume::Send(py.None()))?.into_iteration()
    }

    fn send(&self, py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
        self.step(py, Resume::Send(value))?.into_iteration()
    }

    #[pyo3(signature = (typ, value=None, traceback=None))]
    fn throw(
        &self,
        py: Python<'_>,
        typ: Bound<'_, PyAny>,
        value: Option<Bound<'_, PyAny>>,
        traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _ = traceback;
        let exc = match value.filter(|v| !v.is_none()) {
            Some(v) => PyErr::from_value(v),
            None if typ.is_instance_of::<pyo3::types::PyType>() => PyErr::from_value(typ.call0()?),
            None => PyErr::from_value(typ),
        };
        self.step(py, Resume::Throw(exc))?.into_iteration()
    }

    /// Give up on the call (cancels the work it started).
    fn close(&self) {
        if let Ok(mut state) = self.state.try_lock() {
            state.future = None;
        }
    }

    fn __repr__(&self) -> &'static str {
        "<plughost.Call>"
    }

    /// The asyncio future a suspended call waits on can lead back to the
    /// call (its callbacks hold the awaiting task): let the garbage
    /// collector see that edge, so an abandoned loop's cycles are freed.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        if let Ok(state) = self.state.try_lock() {
            if let Some(slot) = state.waker.as_ref().and_then(|w| w.waiting()) {
                if let Some(wait) = &slot.wait {
                    visit.call(wait)?;
                }
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Ok(mut state) = self.state.try_lock() {
            state.future = None;
            state.waker = None;
        }
    }
}

/// Wakes the caller's task when a call that waits outside Python can go on.
#[derive(Default)]
struct LoopWaker {
    slot: Mutex<WakerSlot>,
}

#[derive(Default)]
struct WakerSlot {
    /// Woken before the step yielded: poll again instead of waiting.
    woken: bool,
    /// The future of the caller's loop the task waits on.
    wait: Option<Py<PyAny>>,
}

impl LoopWaker {
    /// A future of the running loop to wait on, or `None` when already woken.
    fn arm(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        // Made before taking the lock: no Python runs while it is held.
        let wait = runtime().wait_future.bind(py).call0()?.unbind();
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if std::mem::take(&mut slot.woken) {
            return Ok(None);
        }
        slot.wait = Some(wait.clone_ref(py));
        Ok(Some(wait))
    }

    /// The future a suspended step waits on, for the garbage collector.
    fn waiting(&self) -> Option<std::sync::MutexGuard<'_, WakerSlot>> {
        self.slot.try_lock().ok()
    }
}

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let wait = {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            match slot.wait.take() {
                Some(w) => w,
                None => {
                    slot.woken = true;
                    return;
                }
            }
        };
        // From any thread; never while the interpreter exits.
        let _ = try_attach(|py| {
            if let Err(e) = runtime().wake.bind(py).call1((wait,)) {
                tracing::debug!("could not wake an awaiting task: {e}");
            }
        });
    }
}

/// Give `plughost.Call` the C-level `am_send` slot, which pyo3 does not
/// generate. CPython 3.11's `await` (and asyncio's C task on every
/// version) resumes an awaitable through `PyIter_Send`, which calls this
/// slot when there is one: the finished call hands its value back as a
/// return status, with no `StopIteration` raised and caught for it.
/// (From 3.12 the interpreter's `await` uses `__next__`/`send`, which stay.)
#[cfg(Py_LIMITED_API)]
pub fn install_send_slot(_py: Python<'_>) {
    // The stable ABI hides the heap type's `as_async` block: an abi3 build
    // (a worker on another Python, issue 47) resumes `plughost.Call`
    // through `send`, as 3.12+ does anyway.
}

/// See the stable-ABI variant above.
#[cfg(not(Py_LIMITED_API))]
pub fn install_send_slot(py: Python<'_>) {
    let ty = py.get_type::<PyCall>();
    let raw = ty.as_type_ptr();
    // SAFETY: the GIL is held and `raw` is the live type object pyo3 made
    // for `PyCall` with `PyType_FromSpec`: a heap type (checked), whose
    // `tp_as_async` points into the type's own writable `as_async` block
    // (non-null: the class defines `__await__`). No instance has been
    // resumed through the slot yet, and the slot is read afresh on every
    // `PyIter_Send`, so setting it now is seen by every later send.
    unsafe {
        let heap = ffi::PyType_GetFlags(raw) & ffi::Py_TPFLAGS_HEAPTYPE != 0;
        let methods = (*raw).tp_as_async;
        if heap && !methods.is_null() {
            (*methods).am_send = Some(call_am_send);
            ffi::PyType_Modified(raw);
        }
    }
}

/// `am_send` of `plughost.Call`: one step, resumed with `arg`.
#[cfg(not(Py_LIMITED_API))]
unsafe extern "C" fn call_am_send(
    slf: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    // CPython calls the slot with the GIL held, but outside any pyo3
    // trampoline: `attach` marks the thread attached for pyo3 (one
    // `PyGILState_Ensure` on a thread that holds the GIL: a counter), so
    // what the step calls into Python does not do it again each time.
    // SAFETY: the arguments are as CPython passes them to the slot.
    Python::attach(|py| unsafe { send_attached(py, slf, arg, result) })
}

/// [`call_am_send`] on an attached thread.
///
/// # Safety
/// `slf` is a live `plughost.Call`, `arg` a live object or null, and
/// `result` writable: what CPython passes to `am_send`.
#[cfg(not(Py_LIMITED_API))]
unsafe fn send_attached(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as the function requires (the slot is only on the
        // `plughost.Call` type); the borrowed references outlive the call.
        let (call, arg) = unsafe {
            let call = Bound::<PyAny>::from_borrowed_ptr(py, slf).cast_into_unchecked::<PyCall>();
            let arg = if arg.is_null() {
                py.None()
            } else {
                Bound::<PyAny>::from_borrowed_ptr(py, arg).unbind()
            };
            (call, arg)
        };
        call.get().step(py, Resume::Send(arg))
    }));
    let (status, object) = match stepped {
        Ok(Ok(Stepped::Yield(wait))) => (ffi::PySendResult::PYGEN_NEXT, wait.into_ptr()),
        Ok(Ok(Stepped::Return(value))) => (ffi::PySendResult::PYGEN_RETURN, value.into_ptr()),
        Ok(Err(error)) => {
            error.restore(py);
            (ffi::PySendResult::PYGEN_ERROR, std::ptr::null_mut())
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a plughost call panicked");
            pyo3::panic::PanicException::new_err(message.to_string()).restore(py);
            (ffi::PySendResult::PYGEN_ERROR, std::ptr::null_mut())
        }
    };
    // SAFETY: `result` is the caller's out-pointer; it takes the new
    // reference (or null with the exception set).
    unsafe { *result = object };
    status
}
