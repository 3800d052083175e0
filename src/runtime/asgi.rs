//! An ASGI application (a plugin's FastAPI app) as a core
//! [`HttpApp`]: each request runs on plughost's asyncio loop through
//! `_plughost_asgi` (`python/plughost/_asgi.py`): the request body goes on
//! streaming in after the call starts, as the application reads it (with
//! back-pressure), its response messages are forwarded as they are sent —
//! a streaming response streams — and a client that goes away cancels the
//! application's task (mid-body, the application sees `http.disconnect`). The lifespan
//! protocol runs at the server's start and stop, as uvicorn runs it.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCFunction, PyDict, PyModule, PyTuple};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use super::bridge::{self, Awaited};
use super::{module_from_source, plugin_error, try_attach};
use crate::core::hooks::BoxFuture;
use crate::core::http_app::{AppRequest, AppResponse, BodyRest, HttpApp};
use crate::core::outcome::PluginError;

const SOURCE: &str = include_str!("../../python/plughost/_asgi.py");

static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    MODULE
        .get_or_try_init(py, || {
            module_from_source(py, "_plughost_asgi", SOURCE, false).map(Bound::unbind)
        })
        .map(|m| m.bind(py))
}

/// What the application sent.
enum Message {
    Start(u16, Vec<(Vec<u8>, Vec<u8>)>),
    Body(Vec<u8>, bool),
}

fn message(args: &Bound<'_, PyTuple>) -> PyResult<Message> {
    let item: Bound<'_, PyTuple> = args.get_item(0)?.cast_into()?;
    let kind: String = item.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "start" => Message::Start(item.get_item(1)?.extract()?, item.get_item(2)?.extract()?),
        _ => Message::Body(item.get_item(1)?.extract()?, item.get_item(2)?.extract()?),
    })
}

/// One ASGI application.
pub struct AsgiApp {
    app: Py<PyAny>,
    lifespan: Py<PyAny>,
}

impl AsgiApp {
    pub fn new(py: Python<'_>, app: Py<PyAny>) -> PyResult<AsgiApp> {
        let lifespan = module(py)?
            .getattr("Lifespan")?
            .call1((app.bind(py),))?
            .unbind();
        Ok(AsgiApp { app, lifespan })
    }

    /// Run `lifespan.<which>()` to its end.
    fn lifespan_step(&self, which: &'static str) -> BoxFuture<Result<(), PluginError>> {
        let started = try_attach(|py| match self.lifespan.bind(py).call_method0(which) {
            Ok(coroutine) => Ok(bridge::resolve(py, coroutine)),
            Err(e) => Err(plugin_error(py, &e)),
        });
        Box::pin(async move {
            match started.map_err(|e| PluginError::native(e.to_string()))?? {
                Awaited::Ready(r) => settle(r),
                Awaited::Pending(task) => settle(task.await),
            }
        })
    }
}

/// The ASGI connection scope of `request`.
fn connection_of<'py>(py: Python<'py>, request: &AppRequest) -> PyResult<Bound<'py, PyAny>> {
    let client = request.client.map(|a| (a.ip().to_string(), a.port()));
    module(py)?.getattr("scope")?.call1((
        &request.method,
        &request.path,
        &request.query,
        request
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect::<Vec<_>>(),
        client,
        Option::<(String, u16)>::None,
    ))
}

fn error_of(e: &PyErr) -> PluginError {
    try_attach(|py| plugin_error(py, e)).unwrap_or_else(|e| PluginError::native(e.to_string()))
}

fn settle(r: bridge::Outcome) -> Result<(), PluginError> {
    r.map(|_| ()).map_err(|e| {
        try_attach(|py| plugin_error(py, &e)).unwrap_or_else(|e| PluginError::native(e.to_string()))
    })
}

impl HttpApp for AsgiApp {
    fn startup(&self) -> BoxFuture<Result<(), PluginError>> {
        self.lifespan_step("startup")
    }

    fn shutdown(&self) -> BoxFuture<Result<(), PluginError>> {
        self.lifespan_step("shutdown")
    }

    fn call(&self, mut request: AppRequest) -> BoxFuture<Result<AppResponse, PluginError>> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
        let rest = request.rest.take();
        let credit = Arc::new(Semaphore::new(BODY_CHUNKS_AHEAD));
        // Cancelled when the application's coroutine lets go of `emit`
        // (it ended, or was cancelled): the body feeder stops with it.
        let done = CancellationToken::new();
        let started = try_attach(|py| -> PyResult<(Awaited, Option<Py<PyAny>>, Py<PyAny>)> {
            let m = module(py)?;
            let connection = connection_of(py, &request)?;
            let held = done.clone().drop_guard();
            let emit = PyCFunction::new_closure(
                py,
                None,
                None,
                move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
                    let _held = &held;
                    // A closed channel is a client that went away: the task is being cancelled.
                    let _ = tx.send(message(args)?);
                    Ok(())
                },
            )?;
            let inbox = if rest.is_some() {
                let credit = credit.clone();
                let pull = PyCFunction::new_closure(
                    py,
                    None,
                    None,
                    move |_: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
                        credit.add_permits(1);
                        Ok(())
                    },
                )?;
                Some(m.getattr("Inbox")?.call1((pull,))?)
            } else {
                None
            };
            let body = pyo3::types::PyBytes::new(py, &request.body);
            let outbox = m.getattr("Outbox")?.call1((BODY_CHUNKS_OUT,))?;
            let coroutine = m.getattr("http")?.call1((
                self.app.bind(py),
                connection,
                body,
                inbox.as_ref(),
                emit,
                &outbox,
            ))?;
            Ok((
                bridge::resolve(py, coroutine),
                inbox.map(Bound::unbind),
                outbox.unbind(),
            ))
        });
        Box::pin(async move {
            let started = started.map(|r| {
                r.map(|(awaited, inbox, outbox)| {
                    if let (Some(inbox), Some(rest)) = (inbox, rest) {
                        tokio::spawn(feed(inbox, rest, credit, done));
                    }
                    (awaited, outbox)
                })
            });
            let (task, outbox) = match started {
                Ok(Ok((Awaited::Pending(task), outbox))) => (task, outbox),
                // Finished before it first waited (most small answers).
                Ok(Ok((Awaited::Ready(r), _))) => return answered(rx, r),
                Ok(Err(e)) => {
                    return Err(try_attach(|py| plugin_error(py, &e))
                        .unwrap_or_else(|e| PluginError::native(e.to_string())))
                }
                Err(e) => return Err(PluginError::native(e.to_string())),
            };
            let mut task = Box::pin(task);
            let (status, headers) = tokio::select! {
                biased;
                m = rx.recv() => match m {
                    Some(Message::Start(status, headers)) => (status, headers),
                    _ => return Err(PluginError::native("the application sent a body before its http.response.start")),
                },
                done = &mut task => return answered(rx, done),
            };
            let (body_tx, body_rx) = mpsc::channel(BODY_CHUNKS_QUEUED);
            tokio::spawn(forward(rx, task, body_tx, outbox));
            Ok(AppResponse {
                status,
                headers,
                body: body_rx,
            })
        })
    }

    fn same_as(&self, other: &dyn HttpApp) -> bool {
        other
            .as_any()
            .downcast_ref::<AsgiApp>()
            .is_some_and(|o| o.app.as_ptr() == self.app.as_ptr())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The response of an application whose task has ended: what it sent is
/// all there is. A failure after the answer started is logged.
fn answered(
    mut rx: mpsc::UnboundedReceiver<Message>,
    done: bridge::Outcome,
) -> Result<AppResponse, PluginError> {
    match rx.try_recv() {
        Ok(Message::Start(status, headers)) => Ok(finished_response(status, headers, rx, done)),
        _ => {
            settle(done)?;
            Err(PluginError::native(
                "the application returned without sending http.response.start",
            ))
        }
    }
}

/// What follows the start of an answer whose task has ended.
fn finished_response(
    status: u16,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    mut rx: mpsc::UnboundedReceiver<Message>,
    done: bridge::Outcome,
) -> AppResponse {
    let body_rx = collected(&mut rx);
    if let Err(e) = settle(done) {
        // Starlette sends its 500 answer, then raises: the answer stands.
        tracing::warn!(
            "a plugin route raised after it answered: {}{}",
            e.message,
            e.traceback
                .as_deref()
                .map(|t| format!("\n{t}"))
                .unwrap_or_default()
        );
    }
    AppResponse {
        status,
        headers,
        body: body_rx,
    }
}

/// The body chunks an application that has ended sent, all there already.
fn collected(
    rx: &mut mpsc::UnboundedReceiver<Message>,
) -> mpsc::Receiver<Result<Vec<u8>, PluginError>> {
    let mut chunks = Vec::new();
    while let Ok(m) = rx.try_recv() {
        if let Message::Body(chunk, _) = m {
            chunks.push(chunk);
        }
    }
    let (body_tx, body_rx) = mpsc::channel(chunks.len().max(1));
    for chunk in chunks {
        let _ = body_tx.try_send(Ok(chunk));
    }
    body_rx
}

/// How many response body chunks an application may send ahead of what
/// the client's connection has taken: its `send` waits for room past it
/// (`Outbox` in `_asgi.py`), so a client that stops reading stalls the
/// application instead of making the server buffer its answer.
const BODY_CHUNKS_OUT: usize = 4;

/// How many chunks wait between [`forward`] and the connection.
const BODY_CHUNKS_QUEUED: usize = 2;

/// Forward the body the application sends until its last chunk, giving
/// the application room for one more chunk (its `Outbox`) each time the
/// connection took one. A client that went away (the body's receiver
/// dropped) is told to the application as uvicorn tells it — its next
/// `receive()` is `http.disconnect`, its `send` waits for good — so it
/// ends its own way (Starlette's streaming response cancels its generator
/// and returns, and the generator is closed); one still running after
/// [`DISCONNECT_GRACE`] is cancelled.
async fn forward(
    mut rx: mpsc::UnboundedReceiver<Message>,
    mut task: std::pin::Pin<Box<bridge::PendingAwait>>,
    body: mpsc::Sender<Result<Vec<u8>, PluginError>>,
    outbox: Py<PyAny>,
) {
    let gone = loop {
        tokio::select! {
            m = rx.recv() => match m {
                Some(Message::Body(chunk, more)) => {
                    if body.send(Ok(chunk)).await.is_err() {
                        break true;
                    }
                    if !more {
                        // The answer is complete; let the task finish on its own.
                        let _ = (&mut task).await;
                        return;
                    }
                    if try_attach(|py| outbox.bind(py).call_method0("give").map(|_| ())).is_err() {
                        break false;
                    }
                }
                Some(Message::Start(..)) => {}
                None => return,
            },
            done = &mut task => {
                while let Ok(Message::Body(chunk, _)) = rx.try_recv() {
                    if body.send(Ok(chunk)).await.is_err() {
                        return;
                    }
                }
                if let Err(e) = settle(done) {
                    let _ = body.send(Err(e)).await;
                }
                return;
            }
            _ = body.closed() => break true,
        }
    };
    if gone && try_attach(|py| outbox.bind(py).call_method0("disconnect").map(|_| ())).is_ok() {
        let _ = tokio::time::timeout(DISCONNECT_GRACE, &mut task).await;
    }
    // Dropping `task` cancels it if it is still running.
}

/// How long an application whose client went away may take to end on its
/// own before its task is cancelled.
const DISCONNECT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// How many chunks of a streamed request body are read ahead of the
/// application: enough to keep a reading application busy, few enough that
/// a slow one holds little of an upload in memory.
const BODY_CHUNKS_AHEAD: usize = 4;

/// Feed the rest of a request body into the application's [`Inbox`]
/// (`_asgi.py`), a chunk for each one the application has taken; the end
/// is `(b"", False)`, a cut body `None` (the application's next
/// `receive()` is `http.disconnect`). Stops when the application is done.
async fn feed(
    inbox: Py<PyAny>,
    mut rest: BodyRest,
    credit: Arc<Semaphore>,
    done: CancellationToken,
) {
    use futures_util::StreamExt;
    loop {
        tokio::select! {
            biased;
            () = done.cancelled() => return,
            permit = credit.acquire() => match permit {
                Ok(permit) => permit.forget(),
                Err(_) => return,
            },
        }
        let item = tokio::select! {
            biased;
            () = done.cancelled() => return,
            item = rest.0.next() => item,
        };
        let (message, last) = match item {
            Some(Ok(chunk)) => (Some((chunk, true)), false),
            None => (Some((Vec::new(), false)), true),
            Some(Err(cut)) => {
                tracing::debug!("a plugin route's request body was cut: {cut:?}");
                (None, true)
            }
        };
        let put = try_attach(|py| {
            let message =
                message.map(|(chunk, more)| (pyo3::types::PyBytes::new(py, &chunk), more));
            inbox.bind(py).call_method1("put", (message,)).map(|_| ())
        });
        if last || !matches!(put, Ok(Ok(()))) {
            return;
        }
    }
}

/// An application object as a shared [`HttpApp`].
pub fn app(py: Python<'_>, app: Py<PyAny>) -> PyResult<Arc<dyn HttpApp>> {
    Ok(Arc::new(AsgiApp::new(py, app)?))
}

/// What [`run_collected`] hands back: the coroutine's value, and the
/// response it sent, if it sent one.
pub type Collected = (Py<PyAny>, Option<AppResponse>);

/// Run the coroutine `make(connection, emit)` builds for `request` to its
/// end: what it returned, and the response it sent through `emit`, if any.
pub fn run_collected(
    request: &AppRequest,
    make: impl for<'py> FnOnce(
        Python<'py>,
        Bound<'py, PyAny>,
        Bound<'py, PyCFunction>,
    ) -> PyResult<Bound<'py, PyAny>>,
) -> BoxFuture<Result<Collected, PluginError>> {
    let (tx, rx) = mpsc::unbounded_channel::<Message>();
    let started = try_attach(|py| -> PyResult<Awaited> {
        let connection = connection_of(py, request)?;
        let emit = PyCFunction::new_closure(
            py,
            None,
            None,
            move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
                let _ = tx.send(message(args)?);
                Ok(())
            },
        )?;
        Ok(bridge::resolve(py, make(py, connection, emit)?))
    });
    Box::pin(async move {
        let done = match started {
            Ok(Ok(Awaited::Ready(r))) => r,
            Ok(Ok(Awaited::Pending(task))) => task.await,
            Ok(Err(e)) => return Err(error_of(&e)),
            Err(e) => return Err(PluginError::native(e.to_string())),
        };
        let value = done.map_err(|e| error_of(&e))?;
        let mut rx = rx;
        let response = match rx.try_recv() {
            Ok(Message::Start(status, headers)) => Some(AppResponse {
                status,
                headers,
                body: collected(&mut rx),
            }),
            _ => None,
        };
        Ok((value, response))
    })
}

/// `request`'s ASGI HTTP scope (no body), for a plugin callable that reads
/// a request's head (Felix's `rate_limit_key(request)`).
pub fn scope_of<'py>(py: Python<'py>, request: &AppRequest) -> PyResult<Bound<'py, PyAny>> {
    connection_of(py, request)
}
