//! Sessions in PostgreSQL (`serve --sessions postgres://…`), shared by
//! every replica of a cluster.
//!
//! A transcript is the rows of `plughost_messages` with its key, in `seq`
//! order, each message's JSON text as written. A turn holds the session's
//! lease ([`crate::cluster::lease`]); the messages it writes carry the
//! lease's owner and stay `pending` until the lease is released at the
//! turn's end, when the same statement marks them complete. A replica
//! killed mid-turn thus loses that turn and only it: the next turn to take
//! the lease deletes the dead turn's pending rows, and the session goes on
//! from its last complete turn. A write is refused once the lease it was
//! made under has been taken by another turn (its owner no longer matches).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::backend::{Held, SessionBackend, Stored, TurnHold};
use super::SessionError;
use crate::cluster::{Cluster, DbError, LeaseError, SessionLease};

/// The PostgreSQL session store of one replica.
pub struct PgSessions {
    cluster: Arc<Cluster>,
    /// The owner of the turn holding each key here (what its writes carry).
    held: Arc<Mutex<HashMap<String, String>>>,
    /// The owners of leases taken before the turn started (by the HTTP
    /// layer, which answers a busy session itself and releases the lease
    /// after the answer is stored), for the turn's hold to write under.
    handed: Mutex<HashMap<String, String>>,
}

fn io(e: DbError) -> std::io::Error {
    std::io::Error::other(e)
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// A turn's hold: the lease, and this replica's note of it.
struct PgHold {
    key: String,
    owner: String,
    held: Arc<Mutex<HashMap<String, String>>>,
    lease: Option<SessionLease>,
}

impl Drop for PgHold {
    fn drop(&mut self) {
        {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if held.get(&self.key) == Some(&self.owner) {
                held.remove(&self.key);
            }
        }
        // Marks the turn's messages complete, then releases.
        drop(self.lease.take());
    }
}

impl PgSessions {
    pub fn new(cluster: Arc<Cluster>) -> PgSessions {
        PgSessions {
            cluster,
            held: Arc::default(),
            handed: Mutex::default(),
        }
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Let the next turn of `key` on this replica write under `lease`,
    /// which the caller keeps and releases.
    pub fn hand_over(&self, key: &str, lease: &SessionLease) {
        self.handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), lease.owner().to_string());
    }

    /// Forget a hand-over no turn took (the request ended before its turn
    /// owned the session).
    pub fn take_back(&self, key: &str) {
        self.handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    fn owner_of(&self, key: &str) -> Option<String> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    async fn take(&self, key: &str, wait: Duration) -> Result<TurnHold, SessionError> {
        let handed = self
            .handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        let (owner, lease) = match handed {
            Some(owner) => (owner, None),
            None => self
                .cluster
                .lease_session(key, wait)
                .await
                .map_err(|e| match e {
                    LeaseError::Busy { key, waited } => SessionError::Busy {
                        key,
                        holder: None,
                        waited,
                    },
                    LeaseError::Db(e) => self.error(key, "lease the session", io(e)),
                })
                .map(|l| (l.owner().to_string(), Some(l)))?,
        };
        let (k, o) = (key.to_string(), owner.clone());
        // What a turn that died under an earlier lease left.
        self.cluster
            .db()
            .run(move |c| async move {
                c.execute(
                    "DELETE FROM plughost_messages WHERE key = $1 AND pending AND turn <> $2",
                    &[&k, &o],
                )
                .await?;
                Ok(())
            })
            .await
            .map_err(|e| self.error(key, "drop an unfinished turn", io(e)))?;
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), owner.clone());
        Ok(Box::new(PgHold {
            key: key.to_string(),
            owner,
            held: self.held.clone(),
            lease,
        }))
    }

    fn error(&self, key: &str, doing: &'static str, source: std::io::Error) -> SessionError {
        SessionError::Io {
            key: key.to_string(),
            path: self.cluster.url().into(),
            doing,
            source,
        }
    }
}

impl SessionBackend for PgSessions {
    fn describe(&self) -> String {
        self.cluster.url().to_string()
    }

    fn load(&self, key: &str) -> std::io::Result<Stored> {
        let (k, owner) = (key.to_string(), self.owner_of(key).unwrap_or_default());
        self.cluster
            .db()
            .block(move |c| async move {
                let rows = c
                    .query(
                        "SELECT body FROM plughost_messages WHERE key = $1 AND archived IS NULL \
                         AND (NOT pending OR turn = $2) ORDER BY seq",
                        &[&k, &owner],
                    )
                    .await?;
                let started = c
                    .query_opt(
                        "SELECT started FROM plughost_sessions WHERE key = $1",
                        &[&k],
                    )
                    .await?
                    .is_some_and(|r| r.get::<_, bool>(0));
                Ok(Stored {
                    lines: rows.iter().map(|r| r.get(0)).collect(),
                    started,
                })
            })
            .map_err(io)
    }

    fn append(&self, key: &str, line: &str) -> std::io::Result<()> {
        let (k, body) = (key.to_string(), line.to_string());
        let owner = self.owner_of(key);
        let written = self.cluster.db().block(move |c| async move {
            let n = match owner {
                // Fenced: only while this turn's lease is the session's.
                Some(owner) => {
                    c.execute(
                        "WITH s AS (INSERT INTO plughost_sessions (key, started) VALUES ($1, true) \
                         ON CONFLICT (key) DO UPDATE SET started = true WHERE NOT plughost_sessions.started) \
                         INSERT INTO plughost_messages (key, turn, pending, body) \
                         SELECT $1, $2, true, $3 WHERE EXISTS \
                         (SELECT 1 FROM plughost_leases WHERE key = $1 AND owner = $2)",
                        &[&k, &owner, &body],
                    )
                    .await?
                }
                // Outside a turn (a session hook at eviction): complete at once.
                None => {
                    c.execute(
                        "WITH s AS (INSERT INTO plughost_sessions (key, started) VALUES ($1, true) \
                         ON CONFLICT (key) DO NOTHING) \
                         INSERT INTO plughost_messages (key, body) VALUES ($1, $2)",
                        &[&k, &body],
                    )
                    .await?
                }
            };
            Ok(n)
        });
        match written.map_err(io)? {
            1 => Ok(()),
            _ => Err(std::io::Error::other(format!(
                "session '{key}': this turn's lease was taken by another replica (it expired); the message is not stored"
            ))),
        }
    }

    fn replace(&self, key: &str, messages: &[Value], aside: &[String]) -> std::io::Result<()> {
        let lines: Vec<String> = messages
            .iter()
            .map(|m| serde_json::to_string(m).expect("a JSON value serialises"))
            .collect();
        let (k, aside, stamp) = (key.to_string(), aside.to_vec(), now_millis());
        self.cluster
            .db()
            .block(move |c| async move {
                // One statement: the old rows archived, the new ones
                // written, or neither.
                c.execute(
                    "WITH old AS (UPDATE plughost_messages SET archived = $3 \
                     WHERE key = $1 AND archived IS NULL), \
                     side AS (INSERT INTO plughost_messages (key, archived, body) \
                     SELECT $1, -$3, b FROM unnest($4::text[]) AS a(b)) \
                     INSERT INTO plughost_messages (key, body) \
                     SELECT $1, b FROM unnest($2::text[]) WITH ORDINALITY AS t(b, n) ORDER BY n",
                    &[&k, &lines, &stamp, &aside],
                )
                .await?;
                Ok(())
            })
            .map_err(io)
    }

    fn archive(&self, key: &str) -> std::io::Result<()> {
        let (k, stamp) = (key.to_string(), now_millis());
        self.cluster
            .db()
            .block(move |c| async move {
                c.execute(
                    "WITH s AS (UPDATE plughost_sessions SET started = false WHERE key = $1) \
                     UPDATE plughost_messages SET archived = $2 WHERE key = $1 AND archived IS NULL",
                    &[&k, &stamp],
                )
                .await?;
                Ok(())
            })
            .map_err(io)
    }

    fn hold<'a>(&'a self, key: &'a str, wait: Duration) -> Held<'a> {
        Box::pin(self.take(key, wait))
    }

    fn keys(&self) -> std::io::Result<Vec<String>> {
        self.cluster
            .db()
            .block(|c| async move {
                let rows = c
                    .query("SELECT key FROM plughost_sessions ORDER BY key", &[])
                    .await?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            })
            .map_err(io)
    }

    fn import(&self, key: &str, lines: &[String]) -> std::io::Result<bool> {
        let (k, lines) = (key.to_string(), lines.to_vec());
        self.cluster
            .db()
            .block(move |c| async move {
                let row = c
                    .query_one(
                        "WITH s AS (INSERT INTO plughost_sessions (key, started) VALUES ($1, true) \
                         ON CONFLICT (key) DO NOTHING RETURNING key), \
                         m AS (INSERT INTO plughost_messages (key, body) \
                         SELECT s.key, t.b FROM s, unnest($2::text[]) WITH ORDINALITY AS t(b, n) ORDER BY n) \
                         SELECT count(*) FROM s",
                        &[&k, &lines],
                    )
                    .await?;
                Ok(row.get::<_, i64>(0) == 1)
            })
            .map_err(io)
    }
}
