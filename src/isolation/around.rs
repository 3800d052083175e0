//! An isolated plugin's execution middleware (a lane that runs around a
//! tool or model call, issue 47): the middleware runs in the plugin's
//! worker, the rest of its chain — later middleware, the tool or the model
//! call — stays in plughost.
//!
//! A chain is synchronous: a middleware calls `next_call(payload)` and
//! gets the downstream result back in the same call. Across the process
//! boundary that is a call inside a call:
//!
//! 1. plughost's proxy opens a *frame* (`run_in_worker`) and sends
//!    [`Request::Around`] naming it, then waits on the frame.
//! 2. The worker runs the middleware (`answer`); its `next` sends
//!    [`HostCall::ChainNext`] with the frame's number and blocks.
//! 3. plughost's host-call side hands that to the waiting frame
//!    (`deliver_next`), never to a thread of its own: the rest of the
//!    chain borrows the caller's stack, so the caller runs it, then
//!    answers the worker.
//! 4. The worker's middleware returns; [`Reply::Around`] ends the frame.
//!
//! A middleware that never calls `next` is one round trip; each `next` is
//! one more. The chain's semantics are the in-process ones (see
//! [`crate::core::pipeline::middleware`]): the errors cross as
//! [`ExecError`], so a block stays a block and a downstream failure stays
//! downstream's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::protocol::{event_named, Reply, Request};
use super::supervisor::Supervisor;
use crate::core::callbacks::{ExecCall, ExecError, Next};
use crate::core::hooks::HookEvent;
use crate::dialects::host_calls::{HostCall, HostCalls};

/// The bound on one middleware call in its worker, the rest of its chain
/// included (the tool or model call inside has its own limits): past it
/// the worker is taken to be wedged in the middleware.
const AROUND_LIMIT: Duration = Duration::from_secs(3600);

/// [`ExecCall`] as it crosses (its lane named by the event).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecCallWire {
    pub session_id: String,
    pub tool: String,
    pub original: Value,
}

/// What a waiting frame hears: a `next` of its middleware, or its end.
enum FrameEvent {
    Next {
        payload: Value,
        answer: Box<dyn FnOnce(Result<Value, String>) + Send>,
    },
    Done(Result<Reply, crate::core::outcome::PluginError>),
}

/// The frames waiting in this process, by number.
fn frames() -> &'static Mutex<HashMap<u64, Sender<FrameEvent>>> {
    static FRAMES: OnceLock<Mutex<HashMap<u64, Sender<FrameEvent>>>> = OnceLock::new();
    FRAMES.get_or_init(Default::default)
}

static NEXT_FRAME: AtomicU64 = AtomicU64::new(1);

/// Removes its frame from [`frames`] however the call ends.
struct Open(u64);

impl Drop for Open {
    fn drop(&mut self) {
        frames()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

/// In plughost: the worker's middleware of frame `frame` called `next`
/// with `payload`; `answer` sends the worker its result. A frame that has
/// ended is answered at once with an error.
pub(super) fn deliver_next(
    frame: u64,
    payload: Value,
    answer: impl FnOnce(Result<Value, String>) + Send + 'static,
) {
    let waiting = frames()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&frame)
        .cloned();
    let Some(tx) = waiting else {
        answer(Err(
            "next_call() used after its middleware call ended".into()
        ));
        return;
    };
    if let Err(std::sync::mpsc::SendError(FrameEvent::Next { answer, .. })) =
        tx.send(FrameEvent::Next {
            payload,
            answer: Box::new(answer),
        })
    {
        answer(Err(
            "next_call() used after its middleware call ended".into()
        ));
    }
}

/// In plughost: run the worker's middleware number `index` of lane
/// `event` around `next`, serving its `next` calls on this thread.
pub(super) fn run_in_worker(
    sup: &Supervisor,
    index: usize,
    event: &str,
    call: &ExecCall,
    payload: Value,
    next: Next<'_>,
) -> Result<Value, ExecError> {
    let frame = NEXT_FRAME.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = channel();
    frames()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(frame, tx.clone());
    let _open = Open(frame);
    let request = Request::Around {
        index,
        event: event.to_string(),
        frame,
        call: ExecCallWire {
            session_id: call.session_id.clone(),
            tool: call.tool.clone(),
            original: call.original.clone(),
        },
        payload,
    };
    let what = format!("{} middleware", call.kind);
    std::thread::scope(|scope| {
        // The request waits on a thread of its own, so this one is free to
        // run the chain's rest each time the worker's `next` asks.
        let sup = sup.clone();
        let spawned = std::thread::Builder::new()
            .name("plughost-around".into())
            .spawn_scoped(scope, move || {
                let reply = sup.request_blocking(request, AROUND_LIMIT, &what);
                let _ = tx.send(FrameEvent::Done(reply));
            });
        if let Err(e) = spawned {
            return Err(ExecError::Failed(format!(
                "cannot wait for the isolated middleware: {e}"
            )));
        }
        serve_frame(&rx, next)
    })
}

/// Wait for the frame's events: run each `next` here, until it is done.
fn serve_frame(rx: &Receiver<FrameEvent>, next: Next<'_>) -> Result<Value, ExecError> {
    loop {
        let event = crate::core::wait::blocking(|| rx.recv());
        match event {
            Ok(FrameEvent::Next { payload, answer }) => {
                let ran = next(payload);
                answer(Ok(match ran {
                    Ok(value) => json!({ "ok": value }),
                    Err(e) => json!({ "err": e }),
                }));
            }
            Ok(FrameEvent::Done(Ok(Reply::Around { result }))) => return result,
            Ok(FrameEvent::Done(Ok(other))) => {
                return Err(ExecError::Failed(format!(
                    "the worker answered {other:?} to a middleware call"
                )))
            }
            Ok(FrameEvent::Done(Err(e))) => return Err(ExecError::Failed(e.described())),
            Err(_) => return Err(ExecError::Failed("the middleware call was lost".into())),
        }
    }
}

/// In the worker: run middleware `entry` of lane `event` for frame
/// `frame`; its `next` asks plughost over `calls`.
pub(super) fn answer(
    entry: &crate::core::hooks::HookEntry,
    event: &str,
    frame: u64,
    call: ExecCallWire,
    payload: Value,
    calls: Option<std::sync::Arc<dyn HostCalls>>,
) -> Reply {
    let refused = |message: String| Reply::Around {
        result: Err(ExecError::Failed(message)),
    };
    let Some(middleware) = entry.callback.execution() else {
        return refused(format!(
            "hook '{}' is not an execution middleware",
            entry.label
        ));
    };
    let Some(HookEvent::Lane(lane)) = event_named(event) else {
        return refused(format!("no execution lane '{event}'"));
    };
    let Some(calls) = calls else {
        return refused("this worker has no way to its host".into());
    };
    let call = ExecCall {
        kind: lane.lane().name,
        session_id: call.session_id,
        tool: call.tool,
        original: call.original,
    };
    let mut next = |payload: Value| -> Result<Value, ExecError> {
        let answer = calls
            .call(HostCall::ChainNext { frame, payload })
            .map_err(ExecError::Downstream)?;
        if let Some(value) = answer.get("ok") {
            return Ok(value.clone());
        }
        match answer.get("err").cloned().map(serde_json::from_value) {
            Some(Ok(e)) => Err(e),
            _ => Err(ExecError::Downstream(format!(
                "plughost answered {answer} to next_call()"
            ))),
        }
    };
    Reply::Around {
        result: middleware.run(&call, payload, &mut next),
    }
}
