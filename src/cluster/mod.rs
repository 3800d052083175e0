//! Serving one set of sessions from several replicas (`plughost serve
//! --sessions postgres://…`): the database they share ([`db`]), a lease per
//! session so one session's turns never run on two replicas at once
//! ([`lease`], kept between a session's turns on one replica: `keep`),
//! stored answers for retried requests ([`idempotency`]), one
//! run per cluster of each scheduled task's tick ([`ticks`]), and the
//! fingerprint of the plugin set every replica must share ([`fingerprint`]).
//!
//! Layer: above `host` (the fingerprint reads the loaded plugins), below
//! `agent` (its session store writes through [`db`] and takes [`lease`]s).

pub mod db;
pub mod fingerprint;
pub mod idempotency;
mod keep;
pub mod lease;
mod release_batch;
pub mod ticks;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use db::{Db, DbError};
pub(crate) use keep::WANTED_CHANNEL;
pub use lease::{LeaseError, SessionLease};

/// How long a session lease lives unless renewed (renewed every third of it).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// How long a stored answer is given again to a retry with its key.
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// One replica's view of the cluster.
pub struct Cluster {
    db: Arc<Db>,
    /// This process among the replicas: written as the owner of what it holds.
    replica: String,
    /// Where the database is, without a password (for logs and /healthz).
    url: String,
    pub lease_ttl: Duration,
    pub idempotency_window: Duration,
    turns: AtomicU64,
    fingerprint: std::sync::OnceLock<fingerprint::Check>,
    /// The leases this replica keeps between a session's turns.
    keeper: Arc<keep::Keeper>,
    /// Turns' plain releases, stored in batches.
    releases: Arc<release_batch::ReleaseBatch>,
}

impl Cluster {
    /// Connect to `url` and bring its schema up to date.
    pub fn connect(url: &str, lease_ttl: Duration) -> Result<Arc<Cluster>, DbError> {
        let db = Db::connect(url)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "host".into());
        let keeper = Arc::new(keep::Keeper::new(lease_ttl));
        Self::free_kept_on_request(&db, &keeper);
        let releases = release_batch::ReleaseBatch::new(db.clone());
        Ok(Arc::new(Cluster {
            db,
            releases,
            replica: format!("{host}:{}:{nanos:x}", std::process::id()),
            url: redact(url),
            lease_ttl,
            idempotency_window: DEFAULT_IDEMPOTENCY_WINDOW,
            turns: AtomicU64::new(1),
            fingerprint: std::sync::OnceLock::new(),
            keeper,
        }))
    }

    /// Free, when another replica asks for it, a lease this one keeps idle.
    fn free_kept_on_request(db: &Db, keeper: &Arc<keep::Keeper>) {
        let keeper = Arc::downgrade(keeper);
        db.listen(keep::WANTED_CHANNEL, move |key, client| {
            let owner = keeper.upgrade().and_then(|k| k.wanted(&key));
            async move {
                let Some(owner) = owner else { return };
                if let Err(e) = client.execute(keep::FREE_KEPT, &[&key, &owner]).await {
                    tracing::warn!("session '{key}': cannot free its lease for another replica: {e}; it expires by itself");
                }
            }
        });
    }

    /// Free every lease this replica keeps between turns (it is shutting
    /// down): the other replicas take its sessions at once instead of
    /// after the leases' time to live.
    pub async fn free_kept(&self) {
        keep::free(&self.db, self.keeper.kept_owners()).await;
    }

    /// Something other than a turn writes session `key` here: the owner
    /// its lease was kept under between turns, to take it from, if kept.
    pub(crate) fn give_up_kept(&self, key: &str) -> Option<String> {
        self.keeper.give_up(key)
    }

    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// This replica's name in the owner columns.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The database's address without credentials.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A name for one turn (or one claim) of this replica, unique in the cluster.
    pub fn next_owner(&self) -> String {
        let n = self.turns.fetch_add(1, Ordering::Relaxed);
        format!("{}#{n}", self.replica)
    }

    /// Take the lease of session `key` for a new turn, waiting at most `wait`.
    pub async fn lease_session(
        &self,
        key: &str,
        wait: Duration,
    ) -> Result<SessionLease, LeaseError> {
        let owner = self.next_owner();
        SessionLease::acquire(
            (&self.db, &self.keeper, &self.releases),
            key,
            &owner,
            self.lease_ttl,
            wait,
        )
        .await
    }
}

/// `postgres://user:secret@host/db` → `postgres://user@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.split_once('@') {
        Some((auth, tail)) => (Some(auth), tail),
        None => (None, rest),
    };
    match auth {
        Some(auth) => {
            let user = auth.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{tail}")
        }
        None => url.to_string(),
    }
}
