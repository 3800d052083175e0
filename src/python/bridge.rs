//! Awaiting Python awaitables from Rust without holding the GIL.
//!
//! A coroutine is started as a task on the runtime's asyncio loop (a daemon
//! thread), but its first step runs right here on the calling thread, like a
//! Python 3.12 eager task. One that finishes without suspending costs no
//! thread hop at all; one that suspends is left to the loop, and a oneshot
//! channel fed by the task's done-callback wakes the Rust future. The GIL is
//! released while waiting. Dropping the waiting future cancels the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tokio::sync::oneshot;

use crate::python::runtime;

type Outcome = Result<Py<PyAny>, PyErr>;

/// Done-callback handed to the asyncio task; sends its outcome to Rust.
#[pyclass(module = "_plughost_native")]
pub struct Completion {
    sender: Mutex<Option<oneshot::Sender<Outcome>>>,
}

#[pymethods]
impl Completion {
    fn __call__(&self, future: &Bound<'_, PyAny>) {
        let outcome = future.call_method0("result").map(Bound::unbind);
        if let Some(tx) = self.sender.lock().expect("completion lock").take() {
            let _ = tx.send(outcome);
        }
    }
}

/// An awaitable's result: ready now, or pending on the loop.
pub enum Awaited {
    Ready(Outcome),
    Pending(PendingTask),
}

/// `true` when `obj` must be awaited (a coroutine or anything with `__await__`).
#[inline]
pub fn is_awaitable(obj: &Bound<'_, PyAny>) -> bool {
    // The type's `am_await` slot is what `await` itself uses; every class
    // with `__await__` (coroutines, futures, custom awaitables) fills it.
    // Reading it avoids an attribute lookup that raises on every non-awaitable.
    unsafe {
        let ty = pyo3::ffi::Py_TYPE(obj.as_ptr());
        let slots = (*ty).tp_as_async;
        !slots.is_null() && (*slots).am_await.is_some()
    }
}

/// Start an awaitable eagerly; see the module docs.
pub fn start(py: Python<'_>, awaitable: Bound<'_, PyAny>) -> Awaited {
    let rt = runtime();
    let started = rt
        .run_eager
        .bind(py)
        .call1((awaitable,))
        .and_then(|pair| Ok(pair.cast_into::<PyTuple>()?));
    let pair = match started {
        Ok(p) => p,
        Err(e) => return Awaited::Ready(Err(e)),
    };
    let (done, value) = match (pair.get_item(0), pair.get_item(1)) {
        (Ok(d), Ok(v)) => (d.is_truthy().unwrap_or(false), v),
        (Err(e), _) | (_, Err(e)) => return Awaited::Ready(Err(e)),
    };
    if done {
        return Awaited::Ready(Ok(value.unbind()));
    }
    let (tx, rx) = oneshot::channel();
    let watched = Py::new(
        py,
        Completion {
            sender: Mutex::new(Some(tx)),
        },
    )
    .and_then(|completion| rt.watch.bind(py).call1((&value, completion)));
    match watched {
        Ok(_) => Awaited::Pending(PendingTask {
            rx,
            task: Some(value.unbind()),
        }),
        Err(e) => Awaited::Ready(Err(e)),
    }
}

/// A task running on the asyncio loop; resolves to its outcome.
pub struct PendingTask {
    rx: oneshot::Receiver<Outcome>,
    task: Option<Py<PyAny>>,
}

impl Future for PendingTask {
    type Output = Outcome;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.task = None;
                Poll::Ready(r.unwrap_or_else(|_| {
                    Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "the asyncio loop dropped the task",
                    ))
                }))
            }
        }
    }
}

impl Drop for PendingTask {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Abandoned before it finished (a timeout, a cancelled turn):
            // cancel it on its loop.
            Python::try_attach(|py| {
                if let Err(e) = runtime().cancel.bind(py).call1((task,)) {
                    tracing::debug!("could not cancel an abandoned Python task: {e}");
                }
            });
        }
    }
}

/// Await `obj` if it is awaitable, else hand it back; the future needs no GIL.
pub fn resolve(py: Python<'_>, obj: Bound<'_, PyAny>) -> Awaited {
    if is_awaitable(&obj) {
        start(py, obj)
    } else {
        Awaited::Ready(Ok(obj.unbind()))
    }
}
