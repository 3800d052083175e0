//! What `plughost serve` does differently as one replica of several
//! (`--sessions postgres://…`): a named session's lease is taken before
//! its turn (a busy session is answered with HTTP 409 and `Retry-After`),
//! an `Idempotency-Key` claims its request or replays its stored answer,
//! and `/healthz` and `/metrics` show the plugin set's fingerprint against
//! the cluster's. Without a cluster only the fingerprint is kept.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::agent::session::pg::PgSessions;
use crate::cluster::idempotency::{request_hash, Claim, Running};
use crate::cluster::{Cluster, LeaseError, SessionLease};

/// The request header a client retries with.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// A serve process's place in its cluster.
pub struct Replicas {
    /// `sha256:…` of the loaded plugin set.
    pub fingerprint: String,
    /// The shared store and its cluster, when there is one.
    pub shared: Option<(Arc<Cluster>, Arc<PgSessions>)>,
    /// How long a request waits for a session another replica is running.
    pub lease_wait: Duration,
}

/// Set up by [`Replicas::before_turn`]; ended by [`Prepared::answered`] or dropped.
/// The session's lease is held here, not by the turn, so that it is
/// released (the turn's messages marked complete) together with the
/// storing of the answer, before the answer goes out.
#[derive(Default)]
pub struct Prepared {
    claim: Option<Running>,
    lease: Option<(SessionLease, Arc<PgSessions>, String)>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // No answer stored (the turn failed, or the client went away):
        // the lease is released as a turn's is; an unstored claim removed.
        if let Some((lease, pg, key)) = self.lease.take() {
            pg.end_turn_now(&key, lease);
        }
    }
}

fn refuse(status: StatusCode, code: &str, message: String, retry_after: Option<u64>) -> Response {
    let mut response = super::openai_api::error(status, "invalid_request_error", code, message);
    if let Some(secs) = retry_after {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(secs.max(1)),
        );
    }
    response
}

impl Replicas {
    /// Before a chat turn: claim its idempotency key (or answer with the
    /// stored reply), then lease its named session (or answer 409).
    pub async fn before_turn(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        session: Option<&str>,
        stream: bool,
    ) -> Result<Prepared, Response> {
        let Some((cluster, pg)) = &self.shared else {
            return Ok(Prepared::default());
        };
        let retry = cluster.lease_ttl.as_secs().max(1);
        let mut prepared = Prepared::default();
        if let Some(value) = headers.get(IDEMPOTENCY_HEADER) {
            let key =
                match value.to_str() {
                    Ok(k) if !k.trim().is_empty() && k.len() <= 255 => k.trim().to_string(),
                    _ => return Err(refuse(
                        StatusCode::BAD_REQUEST,
                        "invalid_idempotency_key",
                        "the Idempotency-Key header must be 1 to 255 printable ASCII characters"
                            .into(),
                        None,
                    )),
                };
            if stream {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    "invalid_idempotency_key",
                    "Idempotency-Key is supported on non-streamed requests only (\"stream\": false)".into(),
                    None,
                ));
            }
            let scope = format!("{}\u{0}", session.unwrap_or_default());
            let hash = request_hash(&format!("/v1/chat/completions\u{0}{scope}"), body);
            match cluster.idempotency_claim(&format!("chat:{key}"), &hash).await {
                Ok(Claim::Run(running)) => prepared.claim = Some(running),
                Ok(Claim::Replay { status, body }) => return Err(replay(status, body)),
                Ok(Claim::InProgress) => {
                    return Err(refuse(
                        StatusCode::CONFLICT,
                        "idempotency_in_progress",
                        format!("a request with Idempotency-Key '{key}' is still running; retry later for its answer"),
                        Some(1),
                    ))
                }
                Ok(Claim::Mismatch) => {
                    return Err(refuse(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "idempotency_key_reused",
                        format!("Idempotency-Key '{key}' was used for a different request"),
                        None,
                    ))
                }
                Err(e) => return Err(unavailable(e.to_string())),
            }
        }
        // A streamed turn takes its lease itself (a busy session ends its
        // stream with the error): its request returns before the turn runs.
        if let Some(name) = session.filter(|_| !stream) {
            match cluster.lease_session(name, self.lease_wait).await {
                Ok(lease) => {
                    pg.hand_over(name, &lease);
                    prepared.lease = Some((lease, pg.clone(), name.to_string()));
                }
                Err(LeaseError::Busy { key, waited }) => {
                    return Err(refuse(
                        StatusCode::CONFLICT,
                        "session_busy",
                        format!(
                            "session '{key}' has a turn running on another replica that did not end within {} s; retry",
                            waited.as_secs_f64()
                        ),
                        Some(retry),
                    ))
                }
                Err(LeaseError::Db(e)) => return Err(unavailable(e.to_string())),
            }
        }
        Ok(prepared)
    }

    /// `/healthz`'s lines after `ok`.
    pub fn health(&self) -> String {
        let mut text = format!("plugins {}\n", self.fingerprint);
        if let Some((cluster, _)) = &self.shared {
            text.push_str(&format!("sessions {}\n", cluster.url()));
            match cluster.fingerprint() {
                Some(check) if check.matches() => text.push_str("cluster plugins match\n"),
                Some(check) => text.push_str(&format!(
                    "cluster plugins DIFFER: the cluster runs {} (recorded by {}); this replica runs {}\n",
                    check.cluster, check.recorded_by, check.ours
                )),
                None => text.push_str("cluster plugins unchecked\n"),
            }
        }
        text
    }

    /// `/metrics` lines: the fingerprint, and whether it matches the cluster's.
    pub fn metrics(&self) -> String {
        let mut text = format!(
            "# HELP plughost_plugin_set_info The fingerprint of the loaded plugin set.\n\
             # TYPE plughost_plugin_set_info gauge\n\
             plughost_plugin_set_info{{fingerprint=\"{}\"}} 1\n",
            self.fingerprint
        );
        if let Some(check) = self.shared.as_ref().and_then(|(c, _)| c.fingerprint()) {
            text.push_str(&format!(
                "# HELP plughost_plugin_set_matches_cluster 1 when this replica's plugin set is the cluster's.\n\
                 # TYPE plughost_plugin_set_matches_cluster gauge\n\
                 plughost_plugin_set_matches_cluster {}\n",
                u8::from(check.matches())
            ));
        }
        text
    }
}

impl Prepared {
    /// After a turn that failed: the 503 to answer when the shared store
    /// cannot be reached now (an outage cut the turn short: retryable),
    /// else `None` (the failure is the turn's own).
    pub async fn unavailable_now(&self) -> Option<Response> {
        let (_, pg, _) = self.lease.as_ref()?;
        let probe = pg.cluster().db().run(|c| async move {
            c.simple_query("SELECT 1").await?;
            Ok(())
        });
        match tokio::time::timeout(Duration::from_secs(5), probe).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(unavailable(e.to_string())),
            Err(_) => Some(unavailable("no answer within 5 s".into())),
        }
    }

    /// The turn answered `body` with success: its held-back messages
    /// stored and its lease released, with the answer for retries when an
    /// Idempotency-Key asked for one, in one statement, before the answer
    /// goes out. What to answer instead when the turn could not be stored:
    /// a 503 when the store is unreachable, a 409 when the turn ran past
    /// its lease and the session was taken for another turn; the client
    /// sends the turn again either way.
    pub async fn answered(mut self, body: &serde_json::Value) -> Option<Response> {
        let claim = self.claim.take();
        match (self.lease.take(), claim) {
            (Some((lease, pg, key)), claim) => {
                let answer = claim.map(|c| c.answer(200, body.to_string()));
                match pg.end_turn(&key, lease, answer).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!("session '{key}': the turn ran past its lease, and the session was taken for another turn; nothing of this turn was stored");
                        return Some(lease_lost(&key));
                    }
                    Err(e) => {
                        tracing::warn!(
                            "session '{key}': cannot store the turn in the shared session store: {e}"
                        );
                        return Some(unavailable(e.to_string()));
                    }
                }
            }
            (None, Some(claim)) => {
                if let Err(e) = claim.finish(200, body.to_string()).await {
                    tracing::warn!("cannot store the answer for retries: {e}");
                }
            }
            (None, None) => {}
        }
        None
    }
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// The answer to a turn that lost its session's lease before it ended.
fn lease_lost(key: &str) -> Response {
    refuse(
        StatusCode::CONFLICT,
        "session_lease_lost",
        format!(
            "session '{key}': this turn ran past its lease (--lease-ttl) and the session was taken for another turn, so nothing of this turn was stored; send the turn again"
        ),
        Some(1),
    )
}

fn unavailable(message: String) -> Response {
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "sessions_unavailable",
        format!("the shared session store cannot be reached: {message}"),
        Some(1),
    )
}
