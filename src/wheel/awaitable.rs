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
    /// Finish the `await` with this value: `StopIteration(value)`, set the
    /// way CPython's own coroutines set it (the value itself, not an
    /// argument tuple), so the interpreter takes it without building an
    /// exception object.
    fn finish(self, py: Python<'_>) -> PyErr {
        let value: Bound<'_, PyAny> = match self {
            Reply::Text(t) => pyo3::types::PyString::new(py, &t).into_any(),
            Reply::Json(v) => match pythonize::pythonize(py, &v) {
                Ok(object) => object,
                Err(e) => return PyErr::from(e),
            },
            Reply::Nothing => return PyStopIteration::new_err(()),
        };
        // SAFETY: the GIL is held; `value` is a live str, dict, list or
        // scalar (never a tuple or an exception, which CPython would treat
        // differently: `pythonize` makes JSON arrays lists), and
        // `PyErr_SetObject` takes its own references; `PyErr::fetch` then
        // takes the pending exception back out for pyo3 to re-raise.
        unsafe {
            pyo3::ffi::PyErr_SetObject(pyo3::ffi::PyExc_StopIteration, value.as_ptr());
        }
        PyErr::fetch(py)
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
    /// what to wait on, or finish with `StopIteration(result)`.
    fn step(&self, py: Python<'_>, resume: Resume) -> PyResult<Py<PyAny>> {
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
                    return Err(result?.finish(py));
                }
                Poll::Pending => {
                    if let Some(y) = yielded {
                        state.delegated = true;
                        return Ok(y);
                    }
                    state.delegated = false;
                    let Some(waker) = waker else {
                        // Polled without a waker: poll again with one.
                        state.waker = Some(Arc::new(LoopWaker::default()));
                        continue;
                    };
                    match waker.arm(py)? {
                        Some(wait) => return Ok(wait),
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
        self.step(py, Resume::Send(py.None()))
    }

    fn send(&self, py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
        self.step(py, Resume::Send(value))
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
        self.step(py, Resume::Throw(exc))
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
