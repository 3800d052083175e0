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
//! A message written outside any turn takes the lease for its own
//! transaction (see `append_outside_turn`), so no reader ever finds a
//! later `seq` committed before its.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::backend::{Held, SessionBackend, Stored, TurnHold};
use super::SessionError;
use crate::cluster::db::interval;
use crate::cluster::lease::{Released, TurnWrites};
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
    /// What the turn holding each key here has written so far: its
    /// messages (JSON text) and dialect state, stored in one statement
    /// when its hold ends ([`PgHold`]'s drop). Nothing is lost by holding
    /// them back: a turn that dies is dropped whole anyway (its rows stay
    /// pending and the next lease deletes them).
    buffered: Arc<Mutex<HashMap<String, Buffered>>>,
    /// Where the last message a turn here stored is, for the session's
    /// next read (`None`: unknown, its store failed); taken by
    /// [`SessionBackend::take_flushed`].
    flushed: Arc<Mutex<HashMap<String, Option<i64>>>>,
    /// The turn of this replica that last released each key having stored
    /// all it wrote (the lease's `last_turn` it set).
    last_released: Mutex<HashMap<String, String>>,
    /// The keys whose lease, when this replica took it for the turn now
    /// holding it, named this replica's last turn as the last writer:
    /// nothing to read ([`SessionBackend::unchanged_since_last_turn`]).
    unchanged: Mutex<HashSet<String>>,
}

/// How many sessions' last turns a replica remembers
/// (`PgSessions::last_released`) before it forgets them all: a bound on
/// what sessions that never come back leave behind.
const LAST_RELEASED_KEPT: usize = 100_000;

/// A turn's writes held back until its end.
#[derive(Default)]
struct Buffered {
    lines: Vec<String>,
    state: Option<String>,
}

/// A session's row and its visible messages from `seq` `$3` on, in one
/// statement: first, when the session has a row, `(-1, state, started)`;
/// then `(seq, body, NULL)` for each complete message and each pending one
/// of the turn `$2` (this replica's, holding the lease), in order.
const READ_FROM: &str = "SELECT -1::bigint AS seq, state AS body, started FROM plughost_sessions \
     WHERE key = $1 \
     UNION ALL \
     SELECT seq, body, NULL FROM plughost_messages WHERE key = $1 \
     AND archived IS NULL AND (NOT pending OR turn = $2) AND seq >= $3 \
     ORDER BY seq";

/// A session row's `(started, state)`; `(false, None)` without one.
type SessionRow = (bool, Option<String>);

/// The session's `(started, state)` and its messages' `(seq, body)` from
/// [`READ_FROM`]'s rows.
fn read_rows(rows: &[tokio_postgres::Row]) -> (SessionRow, Vec<(i64, String)>) {
    let mut session = (false, None);
    let mut messages = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: i64 = row.get(0);
        if seq == -1 {
            session = (row.get::<_, Option<bool>>(2).unwrap_or(false), row.get(1));
        } else {
            messages.push((seq, row.get::<_, Option<String>>(1).unwrap_or_default()));
        }
    }
    (session, messages)
}

/// Store a turn's held-back messages and state, fenced by its lease: one
/// statement. `(count, last seq)` of the messages stored.
const FLUSH: &str = "WITH fence AS (SELECT 1 FROM plughost_leases WHERE key = $1 AND owner = $2), \
     s AS (INSERT INTO plughost_sessions (key, started, state) SELECT $1, true, $4 FROM fence \
     ON CONFLICT (key) DO UPDATE SET started = true, \
     state = coalesce(excluded.state, plughost_sessions.state) \
     WHERE NOT plughost_sessions.started OR excluded.state IS NOT NULL), \
     m AS (INSERT INTO plughost_messages (key, turn, pending, body) \
     SELECT $1, $2, true, t.b FROM fence, unnest($3::text[]) WITH ORDINALITY AS t(b, n) \
     ORDER BY t.n RETURNING seq) \
     SELECT count(*), coalesce(max(seq), 0) FROM m";

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
    cluster: Arc<Cluster>,
    buffered: Arc<Mutex<HashMap<String, Buffered>>>,
    flushed: Arc<Mutex<HashMap<String, Option<i64>>>>,
}

impl PgHold {
    /// Store what the turn held back, in one statement, before the lease
    /// marks it complete.
    fn flush(&self) {
        let Some(turn) = self
            .buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key)
        else {
            return;
        };
        if turn.lines.is_empty() && turn.state.is_none() {
            return;
        }
        let wanted = turn.lines.len() as i64;
        let (k, o) = (self.key.clone(), self.owner.clone());
        let stored = self.cluster.db().block(move |c| async move {
            let st = c.prepare_cached(FLUSH).await?;
            let row = c
                .query_one(&st, &[&k, &o, &turn.lines, &turn.state])
                .await?;
            Ok((row.get::<_, i64>(0), row.get::<_, i64>(1)))
        });
        let at = match stored {
            Ok((n, last)) if n == wanted => (wanted > 0).then_some(Some(last)),
            Ok(_) => {
                tracing::warn!(
                    "session '{}': this turn's lease was taken by another replica (it expired); its messages are not stored",
                    self.key
                );
                Some(None)
            }
            Err(e) => {
                tracing::warn!(
                    "session '{}': cannot store this turn's messages: {e}",
                    self.key
                );
                Some(None)
            }
        };
        if let Some(at) = at {
            self.flushed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.key.clone(), at);
        }
    }
}

impl Drop for PgHold {
    fn drop(&mut self) {
        // A lease handed over by the HTTP layer is released there, with
        // what the turn held back in the same statement
        // ([`PgSessions::end_turn`]); a turn's own lease is released here.
        if self.lease.is_some() {
            self.flush();
        }
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
            buffered: Arc::default(),
            flushed: Arc::default(),
            last_released: Mutex::default(),
            unchanged: Mutex::default(),
        }
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Let the next turn of `key` on this replica write under `lease`,
    /// which the caller keeps and releases.
    pub fn hand_over(&self, key: &str, lease: &SessionLease) {
        self.note_taken(key, lease);
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
        self.unchanged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Whether the lease just taken for `key` says the session is as this
    /// replica's last turn left it: noted for the turn's read.
    fn note_taken(&self, key: &str, lease: &SessionLease) {
        let ours = {
            let last = self.last_released.lock().unwrap_or_else(|e| e.into_inner());
            lease.last_turn().is_some() && last.get(key).map(String::as_str) == lease.last_turn()
        };
        let mut unchanged = self.unchanged.lock().unwrap_or_else(|e| e.into_inner());
        if ours {
            unchanged.insert(key.to_string());
        } else {
            unchanged.remove(key);
        }
    }

    /// End the turn of `key` whose lease was handed over
    /// ([`hand_over`](Self::hand_over)): what the turn held back, the
    /// release and `answer` (an idempotency key's), in one statement.
    /// `Ok(false)`: the lease was no longer the turn's (it ran past it and
    /// the session was taken for another turn), so nothing of the turn
    /// (messages, state, an answer for its Idempotency-Key) was stored.
    pub async fn end_turn(
        &self,
        key: &str,
        lease: SessionLease,
        answer: Option<crate::cluster::idempotency::Answer>,
    ) -> Result<bool, DbError> {
        self.take_back(key);
        let writes = self.held_back(key);
        let wanted = writes.lines.len() as i64;
        let owner = lease.owner().to_string();
        let stored = lease.release_with(writes, answer).await;
        self.note_stored(key, &owner, wanted, stored.as_ref().ok().copied());
        stored.map(|r| r.fenced)
    }

    /// [`end_turn`](Self::end_turn) from synchronous code, without an
    /// answer (a request that ended without one).
    pub fn end_turn_now(&self, key: &str, lease: SessionLease) {
        self.take_back(key);
        let writes = self.held_back(key);
        let wanted = writes.lines.len() as i64;
        let owner = lease.owner().to_string();
        let stored = lease.release_with_now(writes);
        if let Err(e) = &stored {
            tracing::warn!("session '{key}': cannot store this turn's messages and release its lease: {e}; the lease expires by itself");
        }
        self.note_stored(key, &owner, wanted, stored.ok());
    }

    /// What the turn of `key` held back, taken.
    fn held_back(&self, key: &str) -> TurnWrites {
        self.buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
            .map(|b| TurnWrites {
                lines: b.lines,
                state: b.state,
            })
            .unwrap_or_default()
    }

    /// Where a turn's held-back messages went, for the session's next read,
    /// and whether the turn `owner` is now the session's last writer.
    fn note_stored(&self, key: &str, owner: &str, wanted: i64, stored: Option<Released>) {
        {
            let mut last = self.last_released.lock().unwrap_or_else(|e| e.into_inner());
            match stored {
                Some(r) if r.fenced && r.stored == wanted => {
                    if last.len() >= LAST_RELEASED_KEPT && !last.contains_key(key) {
                        // Forgetting costs only a read at those sessions'
                        // next turns here.
                        last.clear();
                    }
                    last.insert(key.to_string(), owner.to_string())
                }
                _ => last.remove(key),
            };
        }
        let at = match stored {
            Some(r) if r.stored == wanted => (wanted > 0).then_some(Some(r.last)),
            Some(_) => {
                tracing::warn!(
                    "session '{key}': this turn's lease was taken by another replica (it expired); its messages are not stored"
                );
                Some(None)
            }
            None => Some(None),
        };
        if let Some(at) = at {
            self.flushed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.to_string(), at);
        }
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
                .map(|l| {
                    self.note_taken(key, &l);
                    (l.owner().to_string(), Some(l))
                })?,
        };
        // What a turn that died under an earlier lease left went with the
        // lease's taking (`SessionLease::acquire`).
        self.buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), owner.clone());
        Ok(Box::new(PgHold {
            key: key.to_string(),
            owner,
            held: self.held.clone(),
            lease,
            cluster: self.cluster.clone(),
            buffered: self.buffered.clone(),
            flushed: self.flushed.clone(),
        }))
    }

    /// Store a message written outside any turn (a session hook at
    /// eviction), complete at once, under the session's lease: taken,
    /// used and released in one transaction, waiting (at most the lease's
    /// time to live) while a turn holds it. Its `seq` is thus never
    /// allocated while a turn owns the session, nor committed after a
    /// higher one: a replica reading from its last `seq` on cannot miss it.
    fn append_outside_turn(&self, key: &str, line: &str) -> std::io::Result<i64> {
        let (k, body, owner) = (key.to_string(), line.to_string(), self.cluster.next_owner());
        let (ttl, wait) = (interval(self.cluster.lease_ttl), self.cluster.lease_ttl);
        let ours = self.cluster.give_up_kept(key).unwrap_or_default();
        let written = self.cluster.db().block(move |mut c| async move {
            let started = std::time::Instant::now();
            let mut step = Duration::from_millis(2);
            loop {
                let tx = c.transaction().await?;
                let leased = tx
                    .query_opt(
                        crate::cluster::lease::TAKE_LEASE,
                        &[&k, &owner, &ttl, &ours],
                    )
                    .await?;
                if let Some(row) = leased {
                    if row.get::<_, Option<String>>(0).is_some() {
                        // Taken from a turn that died: its pending messages go.
                        tx.execute(crate::cluster::lease::DROP_DEAD, &[&k, &owner])
                            .await?;
                    }
                    let row = tx
                        .query_one(
                            "WITH s AS (INSERT INTO plughost_sessions (key, started) VALUES ($1, true) \
                             ON CONFLICT (key) DO NOTHING), \
                             l AS (UPDATE plughost_leases SET owner = NULL, expires_at = '-infinity', \
                             last_turn = NULL WHERE key = $1 AND owner = $3) \
                             INSERT INTO plughost_messages (key, body) VALUES ($1, $2) RETURNING seq",
                            &[&k, &body, &owner],
                        )
                        .await?;
                    tx.commit().await?;
                    return Ok(Some(row.get::<_, i64>(0)));
                }
                tx.rollback().await?;
                // Held: ask a replica keeping it between turns to free it.
                c.execute("SELECT pg_notify($1, $2)", &[&crate::cluster::WANTED_CHANNEL, &k])
                    .await?;
                let waited = started.elapsed();
                if waited >= wait {
                    return Ok(None);
                }
                tokio::time::sleep(step.min(wait - waited)).await;
                step = (step * 2).min(Duration::from_millis(25));
            }
        });
        match written.map_err(io)? {
            Some(seq) => Ok(seq),
            None => Err(std::io::Error::other(format!(
                "session '{key}': a turn holds it (on this or another replica) and did not end within {} s; the message written outside a turn is not stored",
                wait.as_secs_f64()
            ))),
        }
    }

    /// Drop the messages the turn holding `key` held back (the transcript
    /// is being replaced or archived), keeping its state.
    fn forget_held_back(&self, key: &str) {
        if let Some(turn) = self
            .buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(key)
        {
            turn.lines.clear();
        }
        self.flushed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
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
                let st = c.prepare_cached(READ_FROM).await?;
                let from: i64 = 0;
                let rows = c.query(&st, &[&k, &owner, &from]).await?;
                let ((started, state), messages) = read_rows(&rows);
                Ok(Stored {
                    last: messages.last().map(|m| m.0).unwrap_or_default(),
                    lines: messages.into_iter().map(|m| m.1).collect(),
                    started,
                    state,
                })
            })
            .map_err(io)
    }

    fn load_after(&self, key: &str, after: i64) -> std::io::Result<Option<Stored>> {
        let (k, owner) = (key.to_string(), self.owner_of(key).unwrap_or_default());
        self.cluster
            .db()
            .block(move |c| async move {
                // From the last message this replica has: when it is still
                // there, what follows it is all that is new.
                let st = c.prepare_cached(READ_FROM).await?;
                let rows = c.query(&st, &[&k, &owner, &after]).await?;
                let ((started, state), messages) = read_rows(&rows);
                if messages.first().map(|m| m.0) != Some(after) {
                    return Ok(None);
                }
                Ok(Some(Stored {
                    last: messages.last().map(|m| m.0).unwrap_or(after),
                    lines: messages.into_iter().skip(1).map(|m| m.1).collect(),
                    started,
                    state,
                }))
            })
            .map_err(io)
    }

    fn unchanged_since_last_turn(&self, key: &str) -> bool {
        self.unchanged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
    }

    fn take_flushed(&self, key: &str) -> Option<Option<i64>> {
        self.flushed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
    }

    fn append(&self, key: &str, line: &str) -> std::io::Result<Option<i64>> {
        if self.owner_of(key).is_none() {
            return self.append_outside_turn(key, line).map(Some);
        }
        // Stored with the rest of the turn when its hold ends.
        self.buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.to_string())
            .or_default()
            .lines
            .push(line.to_string());
        Ok(None)
    }

    fn save_state(&self, key: &str, state: &str) -> std::io::Result<()> {
        if self.owner_of(key).is_some() {
            // Stored with the turn's messages when its hold ends.
            self.buffered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key.to_string())
                .or_default()
                .state = Some(state.to_string());
            return Ok(());
        }
        let (k, state) = (key.to_string(), state.to_string());
        let owner = String::new();
        self.cluster
            .db()
            .block(move |c| async move {
                // Fenced like the turn's messages.
                let st = c
                    .prepare_cached(
                        "INSERT INTO plughost_sessions (key, started, state) \
                         SELECT $1, true, $2 WHERE EXISTS \
                         (SELECT 1 FROM plughost_leases WHERE key = $1 AND owner = $3) \
                         ON CONFLICT (key) DO UPDATE SET state = excluded.state",
                    )
                    .await?;
                c.execute(&st, &[&k, &state, &owner]).await?;
                Ok(())
            })
            .map_err(io)
    }

    fn claim(&self, key: &str) -> std::io::Result<bool> {
        let k = key.to_string();
        self.cluster
            .db()
            .block(move |c| async move {
                let row = c
                    .query_opt(
                        "INSERT INTO plughost_sessions (key) VALUES ($1) \
                         ON CONFLICT (key) DO NOTHING RETURNING key",
                        &[&k],
                    )
                    .await?;
                Ok(row.is_some())
            })
            .map_err(io)
    }

    fn replace(&self, key: &str, messages: &[Value], aside: &[String]) -> std::io::Result<i64> {
        // `messages` are the whole transcript, the held-back ones included.
        self.forget_held_back(key);
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
                let row = c
                    .query_one(
                        "WITH old AS (UPDATE plughost_messages SET archived = $3 \
                         WHERE key = $1 AND archived IS NULL), \
                         lt AS (UPDATE plughost_leases SET last_turn = NULL WHERE key = $1), \
                         side AS (INSERT INTO plughost_messages (key, archived, body) \
                         SELECT $1, -$3, b FROM unnest($4::text[]) AS a(b)), \
                         new AS (INSERT INTO plughost_messages (key, body) \
                         SELECT $1, b FROM unnest($2::text[]) WITH ORDINALITY AS t(b, n) ORDER BY n \
                         RETURNING seq) \
                         SELECT coalesce(max(seq), 0) FROM new",
                        &[&k, &lines, &stamp, &aside],
                    )
                    .await?;
                Ok(row.get::<_, i64>(0))
            })
            .map_err(io)
    }

    fn archive(&self, key: &str) -> std::io::Result<()> {
        self.forget_held_back(key);
        let (k, stamp) = (key.to_string(), now_millis());
        self.cluster
            .db()
            .block(move |c| async move {
                c.execute(
                    "WITH s AS (UPDATE plughost_sessions SET started = false, state = NULL WHERE key = $1), \
                     lt AS (UPDATE plughost_leases SET last_turn = NULL WHERE key = $1) \
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

    fn import(&self, key: &str, lines: &[String], state: Option<&str>) -> std::io::Result<bool> {
        let (k, lines, state) = (key.to_string(), lines.to_vec(), state.map(str::to_string));
        self.cluster
            .db()
            .block(move |c| async move {
                let row = c
                    .query_one(
                        "WITH s AS (INSERT INTO plughost_sessions (key, started, state) VALUES ($1, true, $3) \
                         ON CONFLICT (key) DO NOTHING RETURNING key), \
                         lt AS (UPDATE plughost_leases SET last_turn = NULL WHERE key = $1), \
                         m AS (INSERT INTO plughost_messages (key, body) \
                         SELECT s.key, t.b FROM s, unnest($2::text[]) WITH ORDINALITY AS t(b, n) ORDER BY n) \
                         SELECT count(*) FROM s",
                        &[&k, &lines, &state],
                    )
                    .await?;
                Ok(row.get::<_, i64>(0) == 1)
            })
            .map_err(io)
    }
}
