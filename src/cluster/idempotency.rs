//! `Idempotency-Key`: the first answer to a request is stored with its key
//! and given again to every retry within the window
//! ([`DEFAULT_IDEMPOTENCY_WINDOW`](super::DEFAULT_IDEMPOTENCY_WINDOW)), on
//! whichever replica the retry lands.
//!
//! The first request claims the key (a row with an owner and a claim that
//! is renewed while it runs); a retry while it runs is told to come back
//! (HTTP 409), a retry after it is given the stored answer, and a retry
//! with the same key but another body is refused (HTTP 422). An answer
//! that is not a success is not stored: its claim is dropped, so a retry
//! runs the request again. A claim whose replica died expires after the
//! lease time to live and the next retry runs the request.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::db::{interval, Db, DbError};
use super::Cluster;

/// What a request with an `Idempotency-Key` should do.
pub enum Claim {
    /// Run it, then [`Running::finish`] with its answer.
    Run(Running),
    /// Answered before: give this again.
    Replay { status: u16, body: String },
    /// The first request with this key is still running (somewhere).
    InProgress,
    /// The key was used for a different request body.
    Mismatch,
}

/// A claimed key whose request is running here. Dropped without
/// [`finish`](Self::finish), the claim is removed (a retry runs again).
pub struct Running {
    db: Arc<Db>,
    key: String,
    owner: String,
    window: Duration,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: bool,
}

/// A stored answer, written with the release of the session lease.
pub struct Answer {
    pub(super) key: String,
    pub(super) owner: String,
    pub(super) status: i32,
    pub(super) body: String,
    pub(super) window: String,
}

/// The hash a key's request is recognised by: the route and the body.
pub fn request_hash(route: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(route.as_bytes());
    h.update([0]);
    h.update(body);
    hex(&h.finalize())
}

impl Cluster {
    /// Claim `key` (scoped by the caller, e.g. `chat:` + the header) for a
    /// request whose [`request_hash`] is `hash`.
    pub async fn idempotency_claim(&self, key: &str, hash: &str) -> Result<Claim, DbError> {
        let owner = self.next_owner();
        let (k, h, o) = (key.to_string(), hash.to_string(), owner.clone());
        let (ttl, window) = (interval(self.lease_ttl), interval(self.idempotency_window));
        let claimed = self
            .db()
            .run(move |c| async move {
                let won = c
                    .query_opt(
                        "INSERT INTO plughost_idempotency \
                         (key, request_hash, owner, claimed_until, expires_at) \
                         VALUES ($1, $2, $3, now() + $4::text::interval, now() + $5::text::interval) \
                         ON CONFLICT (key) DO UPDATE SET request_hash = excluded.request_hash, \
                         owner = excluded.owner, claimed_until = excluded.claimed_until, \
                         expires_at = excluded.expires_at, status = NULL, response = NULL \
                         WHERE plughost_idempotency.expires_at < now() \
                         OR (plughost_idempotency.status IS NULL AND plughost_idempotency.claimed_until < now()) \
                         RETURNING owner",
                        &[&k, &h, &o, &ttl, &window],
                    )
                    .await?;
                if won.is_some() {
                    return Ok(None);
                }
                let row = c
                    .query_opt(
                        "SELECT request_hash, status, response FROM plughost_idempotency WHERE key = $1",
                        &[&k],
                    )
                    .await?;
                Ok(Some(row.map(|r| {
                    let status: Option<i32> = r.get(1);
                    (r.get::<_, String>(0), status, r.get::<_, Option<String>>(2))
                })))
            })
            .await?;
        Ok(match claimed {
            None => Claim::Run(self.running(key, owner)),
            // Deleted between the two statements: the caller may retry.
            Some(None) => Claim::InProgress,
            Some(Some((stored, _, _))) if stored != hash => Claim::Mismatch,
            Some(Some((_, Some(status), Some(body)))) => Claim::Replay {
                status: status as u16,
                body,
            },
            Some(Some(_)) => Claim::InProgress,
        })
    }

    fn running(&self, key: &str, owner: String) -> Running {
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (db, k, o, ttl) = (
            self.db().clone(),
            key.to_string(),
            owner.clone(),
            self.lease_ttl,
        );
        self.db().spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stop_rx => return,
                    _ = tokio::time::sleep(ttl / 3) => {}
                }
                let (k, o) = (k.clone(), o.clone());
                let _ = db
                    .run(move |c| async move {
                        c.execute(
                            "UPDATE plughost_idempotency SET claimed_until = now() + $3::text::interval \
                             WHERE key = $1 AND owner = $2 AND status IS NULL",
                            &[&k, &o, &interval(ttl)],
                        )
                        .await?;
                        Ok(())
                    })
                    .await;
            }
        });
        Running {
            db: self.db().clone(),
            key: key.to_string(),
            owner,
            window: self.idempotency_window,
            stop: Some(stop_tx),
            done: false,
        }
    }
}

impl Running {
    /// The answer to store, for [`SessionLease::release_answering`](super::SessionLease::release_answering):
    /// the claim is no longer removed when this is dropped.
    pub fn answer(mut self, status: u16, body: String) -> Answer {
        self.done = true;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        Answer {
            key: self.key.clone(),
            owner: self.owner.clone(),
            status: status as i32,
            body,
            window: interval(self.window),
        }
    }

    /// Store the answer for the retries to come.
    pub async fn finish(mut self, status: u16, body: String) -> Result<(), DbError> {
        self.done = true;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let (k, o, w) = (self.key.clone(), self.owner.clone(), interval(self.window));
        self.db
            .run(move |c| async move {
                c.execute(
                    "UPDATE plughost_idempotency SET status = $3, response = $4, \
                     expires_at = now() + $5::text::interval WHERE key = $1 AND owner = $2",
                    &[&k, &o, &(status as i32), &body, &w],
                )
                .await?;
                Ok(())
            })
            .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let (db, k, o) = (self.db.clone(), self.key.clone(), self.owner.clone());
        self.db.spawn(async move {
            let _ = db
                .run(move |c| async move {
                    c.execute(
                        "DELETE FROM plughost_idempotency WHERE key = $1 AND owner = $2 AND status IS NULL",
                        &[&k, &o],
                    )
                    .await?;
                    Ok(())
                })
                .await;
        });
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
