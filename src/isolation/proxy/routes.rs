//! An isolated plugin's HTTP routes as `serve` sees them (issue 47 item
//! 3): a [`MountRoutes`] and an [`HttpApp`] whose every request goes to
//! the plugin's worker, so a route handler's crash ends its worker, never
//! the server, and the plugin's code is never imported here.
//!
//! Bodies stream both ways with backpressure: an upload's next piece is
//! sent once the worker's application has taken the last into its queue,
//! and the worker sends an answer's chunks only
//! [`CHUNKS_AHEAD`](crate::isolation::protocol::http::CHUNKS_AHEAD) ahead
//! of what the client took. A client that goes away cancels the request
//! in the worker (the application sees its task cancelled, as
//! in-process).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::out_of_protocol;
use crate::core::hooks::BoxFuture;
use crate::core::http_app::{
    AppRequest, AppResponse, BodyCut, BodyRest, HttpApp, MountRoutes, RateLimitKey, RoutesEntry,
};
use crate::core::outcome::PluginError;
use crate::isolation::protocol::http::{BodyPiece, Bytes, HttpHead, CHUNKS_AHEAD};
use crate::isolation::protocol::{Reply, Request};
use crate::isolation::supervisor::{Stream, Subject, Supervisor};

/// How long mounting the routes (the plugin's `routes(app)`) may take.
const MOUNT_LIMIT: Duration = Duration::from_secs(30);

/// How long the plugin's rate-limit key may take for one request.
const RATE_KEY_LIMIT: Duration = Duration::from_secs(5);

/// The routes entry of a `Routes` contribution of `sup`'s plugin.
pub(super) fn entry(
    sup: &Supervisor,
    self_authenticating: Vec<String>,
    body_limit: Option<u64>,
    rate_limited: bool,
) -> RoutesEntry {
    RoutesEntry {
        plugin: sup.key().to_string(),
        mount: Arc::new(WorkerRoutes { sup: sup.clone() }),
        self_authenticating,
        body_limit,
        rate_limit_key: rate_limited
            .then(|| Arc::new(WorkerRateKey { sup: sup.clone() }) as Arc<dyn RateLimitKey>),
    }
}

struct WorkerRoutes {
    sup: Supervisor,
}

impl MountRoutes for WorkerRoutes {
    fn mount(&self) -> Result<Arc<dyn HttpApp>, PluginError> {
        self.mount_in(0)
    }

    fn mount_in(&self, round: u64) -> Result<Arc<dyn HttpApp>, PluginError> {
        let asked = self.sup.request_blocking(
            Request::Mount { round },
            MOUNT_LIMIT,
            "mounting the routes",
        )?;
        done(&self.sup, asked)?;
        Ok(Arc::new(WorkerApp {
            sup: self.sup.clone(),
            round,
        }))
    }
}

/// A [`Reply::Done`]'s result.
fn done(sup: &Supervisor, reply: Reply) -> Result<(), PluginError> {
    match reply {
        Reply::Done { result } => result,
        other => Err(out_of_protocol(sup, &other)),
    }
}

struct WorkerRateKey {
    sup: Supervisor,
}

impl RateLimitKey for WorkerRateKey {
    fn key(&self, request: &AppRequest) -> Result<Option<String>, PluginError> {
        let mut head = HttpHead::of(request);
        // The key is named from the head alone.
        head.body = Bytes::default();
        head.streamed = false;
        let asked = self.sup.request_blocking(
            Request::RateKey { head },
            RATE_KEY_LIMIT,
            "its rate_limit_key",
        )?;
        match asked {
            Reply::RateKey { result } => result,
            other => Err(out_of_protocol(&self.sup, &other)),
        }
    }
}

/// Round `round`'s application in the plugin's worker.
struct WorkerApp {
    sup: Supervisor,
    round: u64,
}

impl WorkerApp {
    fn lifespan(&self, start: bool) -> BoxFuture<Result<(), PluginError>> {
        let sup = self.sup.clone();
        let round = self.round;
        let what = Subject::Route(if start { "startup" } else { "shutdown" }.into());
        Box::pin(async move {
            let asked = sup
                .request(Request::Lifespan { round, start }, what)
                .await?;
            done(&sup, asked)
        })
    }
}

impl HttpApp for WorkerApp {
    fn startup(&self) -> BoxFuture<Result<(), PluginError>> {
        self.lifespan(true)
    }

    fn shutdown(&self) -> BoxFuture<Result<(), PluginError>> {
        self.lifespan(false)
    }

    fn call(&self, mut request: AppRequest) -> BoxFuture<Result<AppResponse, PluginError>> {
        let head = HttpHead::of(&request);
        let rest = request.rest.take();
        let what = Subject::Route(request.path.into());
        let sup = self.sup.clone();
        let round = self.round;
        Box::pin(async move {
            let stream = Arc::new(sup.stream_of(Request::Http { round, head }, "an HTTP request")?);
            // The upload goes on beside the answer, and stops with it.
            let upload = rest.map(|rest| {
                let pump = tokio::spawn(upload(stream.clone(), rest));
                AbortOnDrop(pump.abort_handle())
            });
            let first = stream.next(what.clone()).await;
            let (status, headers) = match first {
                Some(Ok(Reply::HttpStart { status, headers })) => (status, headers),
                Some(Ok(Reply::HttpFailed { error })) => return Err(error),
                Some(Err(error)) => return Err(error),
                Some(Ok(other)) => return Err(out_of_protocol(&sup, &other)),
                None => {
                    return Err(PluginError::native(
                        "the route's answer ended before it started",
                    ))
                }
            };
            let (tx, body) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
            tokio::spawn(relay(stream, tx, what, upload, sup));
            Ok(AppResponse {
                status,
                headers: headers.into_iter().map(|(k, v)| (k.0, v.0)).collect(),
                body,
            })
        })
    }

    fn same_as(&self, other: &dyn HttpApp) -> bool {
        other
            .as_any()
            .downcast_ref::<WorkerApp>()
            .is_some_and(|o| o.round == self.round && o.sup.same(&self.sup))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Aborts the upload when the answer is done with.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Send the rest of the body, a piece at a time, each once the worker
/// took the one before.
async fn upload(stream: Arc<Stream>, mut rest: BodyRest) {
    let call = stream.id();
    loop {
        let (piece, last) = match rest.0.next().await {
            Some(Ok(chunk)) => (BodyPiece::Chunk(Bytes(chunk)), false),
            None => (BodyPiece::End, true),
            Some(Err(BodyCut::TooLarge)) => (
                BodyPiece::Cut {
                    too_large: true,
                    why: String::new(),
                },
                true,
            ),
            Some(Err(BodyCut::Disconnected(why))) => (
                BodyPiece::Cut {
                    too_large: false,
                    why,
                },
                true,
            ),
        };
        let taken = stream.ask(Request::HttpBody { call, piece }).await;
        if last || !matches!(taken, Ok(Reply::Delivered)) {
            return;
        }
    }
}

/// Hand the answer's chunks to the client as it takes them, each taken
/// one a credit back to the worker; a client gone drops the stream (which
/// cancels the request in the worker).
async fn relay(
    stream: Arc<Stream>,
    tx: tokio::sync::mpsc::Sender<Result<Vec<u8>, PluginError>>,
    what: Subject,
    upload: Option<AbortOnDrop>,
    sup: Supervisor,
) {
    let _upload = upload;
    let call = stream.id();
    loop {
        let next = tokio::select! {
            next = stream.next(what.clone()) => next,
            _ = tx.closed() => return,
        };
        let chunk = match next {
            Some(Ok(Reply::HttpChunk { data })) => Ok(data.0),
            Some(Ok(Reply::HttpEnd)) | None => return,
            Some(Ok(Reply::HttpFailed { error })) | Some(Err(error)) => Err(error),
            Some(Ok(other)) => Err(out_of_protocol(&sup, &other)),
        };
        let failed = chunk.is_err();
        if tx.send(chunk).await.is_err() || failed {
            return;
        }
        stream.tell(Request::HttpCredit { call, chunks: 1 });
    }
}
