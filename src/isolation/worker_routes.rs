//! The worker's side of an isolated plugin's HTTP routes (issue 47 item
//! 3): its applications by mount round, the requests plughost forwards to
//! them, their streamed bodies in both directions.
//!
//! Backpressure crosses the process as it works in-process: an upload's
//! next piece is taken only when the application's one-piece queue has
//! room ([`Request::HttpBody`](super::protocol::Request::HttpBody) is
//! answered then), and an answer's chunks are sent only
//! [`CHUNKS_AHEAD`] ahead of what the client took (plughost's
//! [`Request::HttpCredit`](super::protocol::Request::HttpCredit)).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tokio::sync::{mpsc, Semaphore};

use super::protocol::http::{BodyPiece, Bytes, HttpHead, CHUNKS_AHEAD};
use super::protocol::Reply;
use super::worker_plugin::{Answer, BoxFuture};
use crate::core::http_app::{BodyCut, BodyRest, HttpApp, RoutesEntry};
use crate::core::outcome::PluginError;

/// Sends one reply of a streamed answer; `true`: the last.
pub(super) type Replies = Arc<dyn Fn(Reply, bool) + Send + Sync>;

type Piece = Result<Vec<u8>, BodyCut>;

/// The plugin's routes, as this worker serves them.
#[derive(Clone, Default)]
pub(super) struct Routes(Arc<Inner>);

#[derive(Default)]
struct Inner {
    entries: Vec<RoutesEntry>,
    /// Each round's application (the first the plugin's mounts gave).
    apps: Mutex<HashMap<u64, Arc<dyn HttpApp>>>,
    /// The streamed bodies of requests in flight, by request id; made by
    /// whichever of the request and its first piece is read first (two
    /// serving threads may read them in either order).
    bodies: Mutex<HashMap<u64, BodyLine>>,
    /// Each answer in flight's credit: the chunks it may still send.
    credits: Mutex<HashMap<u64, Arc<Semaphore>>>,
    /// The requests that ended lately: a piece of their body still on
    /// its way makes no queue nobody would take.
    ended: Mutex<std::collections::VecDeque<u64>>,
}

/// How many ended requests [`Inner::ended`] remembers (more than the
/// pieces the host can have on their way: one per request in flight).
const ENDED_KEPT: usize = 256;

struct BodyLine {
    tx: Option<mpsc::Sender<Piece>>,
    rx: Option<mpsc::Receiver<Piece>>,
}

impl BodyLine {
    fn new() -> BodyLine {
        let (tx, rx) = mpsc::channel(1);
        BodyLine {
            tx: Some(tx),
            rx: Some(rx),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Routes {
    pub(super) fn add(&mut self, entry: RoutesEntry) {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.entries.push(entry);
        }
    }

    /// Round `round`'s application, its routes mounted now if they were
    /// not (a worker started after a crash serves the rounds its
    /// predecessor had): `(app, fresh)`.
    fn app(&self, round: u64) -> Result<(Arc<dyn HttpApp>, bool), PluginError> {
        if let Some(app) = lock(&self.0.apps).get(&round) {
            return Ok((app.clone(), false));
        }
        let mut first = None;
        for entry in &self.0.entries {
            let app = entry.mount.mount_in(round)?;
            first.get_or_insert(app);
        }
        let app = first.ok_or_else(|| PluginError::native("the plugin has no routes"))?;
        lock(&self.0.apps).insert(round, app.clone());
        Ok((app, true))
    }

    /// [`Request::Mount`](super::protocol::Request::Mount).
    pub(super) fn mount(&self, round: u64) -> Answer {
        Answer::Now(Reply::Done {
            result: self.app(round).map(|_| ()),
        })
    }

    /// [`Request::Lifespan`](super::protocol::Request::Lifespan).
    pub(super) fn lifespan(&self, round: u64, start: bool) -> Answer {
        let app = match start {
            true => self.app(round).map(|(app, _)| Some(app)),
            false => Ok(lock(&self.0.apps).remove(&round)),
        };
        Answer::Later(Box::pin(async move {
            let result = match app {
                Ok(Some(app)) if start => app.startup().await,
                Ok(Some(app)) => app.shutdown().await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            Reply::Done { result }
        }))
    }

    /// [`Request::RateKey`](super::protocol::Request::RateKey): the first
    /// bucket one of its plugins names.
    pub(super) fn rate_key(&self, head: HttpHead) -> Answer {
        let request = head.into_request();
        let mut result = Ok(None);
        for key in self
            .0
            .entries
            .iter()
            .filter_map(|e| e.rate_limit_key.as_ref())
        {
            result = key.key(&request);
            if !matches!(result, Ok(None)) {
                break;
            }
        }
        Answer::Now(Reply::RateKey { result })
    }

    /// [`Request::HttpCredit`](super::protocol::Request::HttpCredit).
    pub(super) fn credit(&self, call: u64, chunks: u32) -> Answer {
        if let Some(credit) = lock(&self.0.credits).get(&call) {
            credit.add_permits(chunks as usize);
        }
        Answer::Silent
    }

    /// [`Request::HttpBody`](super::protocol::Request::HttpBody).
    pub(super) fn body(&self, call: u64, piece: BodyPiece) -> Answer {
        let (tx, piece) = {
            if lock(&self.0.ended).contains(&call) {
                return Answer::Now(Reply::Delivered);
            }
            let mut bodies = lock(&self.0.bodies);
            let line = bodies.entry(call).or_insert_with(BodyLine::new);
            match piece {
                BodyPiece::Chunk(bytes) => (line.tx.clone(), Some(Ok(bytes.0))),
                // No piece follows: the queue's sender goes (the stream
                // ends once the application took what is queued).
                BodyPiece::End => (line.tx.take(), None),
                BodyPiece::Cut { too_large, why } => {
                    let cut = match too_large {
                        true => BodyCut::TooLarge,
                        false => BodyCut::Disconnected(why),
                    };
                    (line.tx.take(), Some(Err(cut)))
                }
            }
        };
        Answer::Later(Box::pin(async move {
            // A closed queue is an application that stopped reading (it
            // answered): the piece is dropped, as in-process.
            if let (Some(tx), Some(piece)) = (tx, piece) {
                let _ = tx.send(piece).await;
            }
            Reply::Delivered
        }))
    }

    /// [`Request::Http`](super::protocol::Request::Http): request `id` for
    /// round `round`'s application, answered in steps by `send`. The
    /// routes are mounted (if they were not) here, on the serving thread.
    pub(super) fn http(&self, id: u64, round: u64, head: HttpHead, send: Replies) -> BoxFuture<()> {
        let streamed = head.streamed;
        let mut request = head.into_request();
        if streamed {
            let rx = lock(&self.0.bodies)
                .entry(id)
                .or_insert_with(BodyLine::new)
                .rx
                .take();
            request.rest = rx.map(|rx| {
                let pieces = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|piece| (piece, rx))
                });
                BodyRest(pieces.boxed())
            });
        }
        let credit = Arc::new(Semaphore::new(CHUNKS_AHEAD));
        lock(&self.0.credits).insert(id, credit.clone());
        let app = self.app(round);
        let done = Done {
            routes: self.clone(),
            id,
        };
        Box::pin(async move {
            let _done = done;
            let app = match app {
                Ok((app, true)) => match app.startup().await {
                    Ok(()) => app,
                    Err(error) => return send(Reply::HttpFailed { error }, true),
                },
                Ok((app, false)) => app,
                Err(error) => return send(Reply::HttpFailed { error }, true),
            };
            let mut answer = match app.call(request).await {
                Ok(answer) => answer,
                Err(error) => return send(Reply::HttpFailed { error }, true),
            };
            let headers = std::mem::take(&mut answer.headers);
            send(
                Reply::HttpStart {
                    status: answer.status,
                    headers: headers
                        .into_iter()
                        .map(|(k, v)| (Bytes(k), Bytes(v)))
                        .collect(),
                },
                false,
            );
            while let Some(chunk) = answer.body.recv().await {
                match chunk {
                    Ok(data) => {
                        // Closed only when the request is dropped.
                        let Ok(permit) = credit.acquire().await else {
                            return;
                        };
                        permit.forget();
                        send(Reply::HttpChunk { data: Bytes(data) }, false);
                    }
                    Err(error) => return send(Reply::HttpFailed { error }, true),
                }
            }
            send(Reply::HttpEnd, true);
        })
    }
}

/// Drops what a request kept when it ends (or is cancelled).
struct Done {
    routes: Routes,
    id: u64,
}

impl Drop for Done {
    fn drop(&mut self) {
        let mut ended = lock(&self.routes.0.ended);
        if ended.len() == ENDED_KEPT {
            ended.pop_front();
        }
        ended.push_back(self.id);
        drop(ended);
        lock(&self.routes.0.bodies).remove(&self.id);
        lock(&self.routes.0.credits).remove(&self.id);
    }
}
