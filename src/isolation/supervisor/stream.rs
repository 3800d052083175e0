//! A request answered in several replies: the steps of a batch
//! ([`Request::Batch`](crate::isolation::protocol::Request::Batch)), each
//! taken by the proxy that stands for it, in order; a route's answer
//! ([`Request::Http`](crate::isolation::protocol::Request::Http)), its
//! start and body chunks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::live::{Live, Waiter};
use super::reader::Abandon;
use super::{Subject, Supervisor};
use crate::core::outcome::{PluginError, PluginFault};
use crate::isolation::protocol::{Reply, Request};

/// The replies to one batch still to come. Dropped before its last one
/// came (the call was cancelled, or went another way than the worker's),
/// it cancels the batch in the worker, as an abandoned call is: the worker
/// may still be running a step nobody will read.
pub struct Stream {
    live: Arc<Live>,
    id: u64,
    replies: tokio::sync::Mutex<UnboundedReceiver<Result<(Reply, bool), PluginFault>>>,
    finished: AtomicBool,
    /// What it is, for the log line of one left unfinished.
    what: &'static str,
}

impl Supervisor {
    /// Send `body`, whose replies come one by one ([`Stream::next`]).
    pub fn stream(&self, body: Request) -> Result<Stream, PluginError> {
        self.stream_of(body, "a tool call with its hooks")
    }

    /// [`stream`](Self::stream), `what` naming the request in the log line
    /// of one left unfinished.
    pub fn stream_of(&self, body: Request, what: &'static str) -> Result<Stream, PluginError> {
        let live = self.live()?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let id = live
            .send(body, Waiter::Stream(tx))
            .map_err(PluginError::fault)?;
        Ok(Stream {
            live,
            id,
            replies: tokio::sync::Mutex::new(rx),
            finished: AtomicBool::new(false),
            what,
        })
    }
}

impl Stream {
    /// The request's id, for the requests that name it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Send `body` to this request's worker (not another started since),
    /// unanswered.
    pub fn tell(&self, body: Request) {
        if !self.live.has_ended() {
            self.live.send_unanswered(body);
        }
    }

    /// Ask this request's worker (not another started since) and await
    /// its reply; dropped before it comes, the reply is dropped too.
    pub async fn ask(&self, body: Request) -> Result<Reply, PluginError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.live
            .send(body, Waiter::Async(tx))
            .map_err(PluginError::fault)?;
        match rx.await {
            Ok(reply) => reply.map_err(PluginError::fault),
            Err(_) => Err(PluginError::fault(PluginFault::Unavailable {
                plugin: self.live.key.clone(),
                problem: "its worker dropped the call".into(),
            })),
        }
    }

    /// Whether the worker has sent its last reply to the batch.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// The next reply (`None`: the last one was taken already). Dropping
    /// the future before it comes (a time limit) stops the worker.
    pub async fn next(&self, what: Subject) -> Option<Result<Reply, PluginError>> {
        if self.is_finished() {
            return None;
        }
        let mut replies = self.replies.lock().await;
        // Dropped while waiting, the batch is cancelled in the worker (the
        // guard below) and over: the call's later steps go one request each.
        let mut leaving = Leaving(&self.finished, true);
        let mut guard = Abandon {
            live: &self.live,
            id: self.id,
            what,
            armed: true,
        };
        let got = replies.recv().await;
        guard.armed = false;
        leaving.1 = false;
        let (reply, last) = match got {
            Some(Ok((reply, last))) => (Ok(reply), last),
            Some(Err(fault)) => (Err(PluginError::fault(fault)), true),
            None => (
                Err(PluginError::fault(PluginFault::Unavailable {
                    plugin: self.live.key.clone(),
                    problem: "its worker dropped the call".into(),
                })),
                true,
            ),
        };
        if last {
            self.finished.store(true, Ordering::Release);
        }
        Some(reply)
    }
}

/// Marks the stream finished when a step's wait is dropped.
struct Leaving<'a>(&'a AtomicBool, bool);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::Release);
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.is_finished() || self.live.has_ended() || self.live.is_stopped() {
            return;
        }
        tracing::info!(
            "{} of plugin '{}' was left before its worker finished it; it is cancelled in its worker",
            self.what,
            self.live.key
        );
        self.live.cancel(self.id);
    }
}
