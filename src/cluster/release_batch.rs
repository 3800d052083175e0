//! Group commit of turns' releases: the plain releases (no idempotency
//! answer) of turns of different sessions that end while another batch's
//! statement runs are sent together, as one statement, when it returns.
//!
//! One statement costs PostgreSQL a wake-up, a parse-bind-execute, an
//! executor set-up and a commit whatever it stores, and the replica a round
//! trip through its driver: at 16 clients a replica's turns end a few at a
//! time, and storing them together costs each a fraction of that. A lone
//! turn waits for nothing (its batch is sent at once when none runs), and
//! each turn's release keeps its meaning: fenced by its own lease, stored
//! all or none (the batch is one transaction: an error fails all of it,
//! and each turn's caller is told).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

use super::db::{Db, DbError};
use super::keep::Keeper;
use super::lease::{release_settled, Released, TurnWrites};

/// Statements in flight at once: two, so turns ending while one runs do
/// not wait for it alone.
const IN_FLIGHT: usize = 2;

/// At most this many turns a statement.
const MOST: usize = 64;

/// The releases of a batch, each fenced by its own lease: `$1` keys, `$2`
/// owners, `$3` states, `$4` whether the session row is written, `$5` the
/// lease's new time to live when kept (`NULL`: freed), then every message
/// of the batch as `$6` its session's key and `$7` its JSON text, in order.
/// One row per turn: its key, how many messages were stored, the last
/// one's `seq`, and whether the lease was still its.
const RELEASE_MANY: &str = "WITH i AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], \
     $4::bool[], $5::text[]) AS i(key, owner, state, session_row, keep_for)), \
     gone AS (UPDATE plughost_leases l SET owner = CASE WHEN i.keep_for IS NULL THEN NULL ELSE l.owner END, \
     expires_at = coalesce(now() + i.keep_for::interval, '-infinity'), last_turn = i.owner \
     FROM i WHERE l.key = i.key AND l.owner = i.owner RETURNING l.key), \
     s AS (INSERT INTO plughost_sessions (key, started, state) \
     SELECT i.key, true, i.state FROM i JOIN gone ON gone.key = i.key WHERE i.session_row \
     ON CONFLICT (key) DO UPDATE SET started = true, \
     state = coalesce(excluded.state, plughost_sessions.state) \
     WHERE NOT plughost_sessions.started OR excluded.state IS NOT NULL), \
     m AS (INSERT INTO plughost_messages (key, turn, pending, body) \
     SELECT t.key, i.owner, false, t.body \
     FROM unnest($6::text[], $7::text[]) WITH ORDINALITY AS t(key, body, n) \
     JOIN gone ON gone.key = t.key JOIN i ON i.key = t.key ORDER BY t.n RETURNING key, seq) \
     SELECT i.key, (SELECT count(*) FROM m WHERE m.key = i.key), \
     coalesce((SELECT max(seq) FROM m WHERE m.key = i.key), 0), \
     EXISTS (SELECT 1 FROM gone WHERE gone.key = i.key) FROM i";

/// One turn's release, waiting for its batch.
pub(crate) struct Release {
    pub key: String,
    pub owner: String,
    pub writes: TurnWrites,
    /// The lease's new time to live (interval text) when it is kept.
    pub keep_for: Option<String>,
    /// Told what became of the lease (the release settles it even when
    /// the turn's caller has gone), and when the release was sent.
    pub keeper: Arc<Keeper>,
    pub sent: Instant,
    pub done: oneshot::Sender<Result<Released, DbError>>,
}

/// A replica's queue of plain releases: a turn ending while fewer than
/// [`IN_FLIGHT`] statements run sends its release (with any waiting) at
/// once, from a task of its own; one ending while they run waits in the
/// queue, which each of those tasks empties, a batch a statement, before
/// it ends (group commit with no timer: a lone turn never waits).
pub(crate) struct ReleaseBatch {
    db: Arc<Db>,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Release>,
    running: usize,
}

impl Queue {
    /// The next batch: the oldest waiting releases, a session at most once
    /// (ON CONFLICT may not touch a row twice in a statement: a second
    /// release of one waits for the next batch).
    fn next_batch(&mut self) -> Vec<Release> {
        let mut keys = HashSet::new();
        let mut batch = Vec::new();
        let mut later = VecDeque::new();
        while let Some(r) = self.waiting.pop_front() {
            if batch.len() < MOST && keys.insert(r.key.clone()) {
                batch.push(r);
            } else {
                later.push_back(r);
            }
        }
        self.waiting = later;
        batch
    }
}

impl ReleaseBatch {
    pub(crate) fn new(db: Arc<Db>) -> Arc<ReleaseBatch> {
        Arc::new(ReleaseBatch {
            db,
            queue: Mutex::default(),
        })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `release`; its `done` says what was stored. Only from a task
    /// of a multi-threaded runtime (its statements run there).
    pub(crate) fn send(self: &Arc<Self>, release: Release) {
        let batch = {
            let mut queue = self.queue();
            queue.waiting.push_back(release);
            if queue.running >= IN_FLIGHT {
                return;
            }
            queue.running += 1;
            queue.next_batch()
        };
        let me = self.clone();
        tokio::spawn(async move {
            let mut running = Running(Some(me.clone()));
            let mut batch = batch;
            loop {
                run(&me.db, batch).await;
                let mut queue = me.queue();
                if queue.waiting.is_empty() {
                    queue.running -= 1;
                    running.0 = None;
                    return;
                }
                batch = queue.next_batch();
            }
        });
    }
}

/// Counts a sending task out if it is dropped unfinished (its runtime shut
/// down): the next release starts another.
struct Running(Option<Arc<ReleaseBatch>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(batch) = self.0.take() {
            batch.queue().running -= 1;
        }
    }
}

/// Store one batch and tell each of its turns what became of its release.
async fn run(db: &Db, mut batch: Vec<Release>) {
    if batch.len() == 1 {
        // Alone: the one-turn statement, which PostgreSQL runs faster.
        let r = batch.pop().expect("one release");
        let result = match db.conn_here().await {
            Ok(c) => {
                release_settled(
                    &c, &r.key, &r.owner, r.writes, None, r.keep_for, &r.keeper, r.sent,
                )
                .await
            }
            Err(e) => {
                r.keeper.ended(&r.key);
                Err(e)
            }
        };
        let _ = r.done.send(result);
        return;
    }
    let mut keys = Vec::with_capacity(batch.len());
    let mut owners = Vec::with_capacity(batch.len());
    let mut states = Vec::with_capacity(batch.len());
    let mut rows = Vec::with_capacity(batch.len());
    let mut keep_for = Vec::with_capacity(batch.len());
    let (mut line_keys, mut lines) = (Vec::new(), Vec::new());
    let mut settle = Vec::with_capacity(batch.len());
    for r in batch {
        rows.push(!r.writes.lines.is_empty() || r.writes.state.is_some());
        for line in r.writes.lines {
            line_keys.push(r.key.clone());
            lines.push(line);
        }
        settle.push((
            r.key.clone(),
            r.owner.clone(),
            r.keep_for.is_some(),
            r.keeper,
            r.sent,
            r.done,
        ));
        keys.push(r.key);
        owners.push(r.owner);
        states.push(r.writes.state);
        keep_for.push(r.keep_for);
    }
    let stored: Result<HashMap<String, Released>, DbError> = async {
        let c = db.conn_here().await?;
        let st = c.prepare_cached(RELEASE_MANY).await?;
        let rows = c
            .query(
                &st,
                &[
                    &keys, &owners, &states, &rows, &keep_for, &line_keys, &lines,
                ],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                (
                    row.get::<_, String>(0),
                    Released {
                        stored: row.get(1),
                        last: row.get(2),
                        fenced: row.get(3),
                    },
                )
            })
            .collect::<HashMap<_, _>>())
    }
    .await;
    let mut to_free = Vec::new();
    for (key, owner, keep, keeper, sent, done) in settle {
        let result = match &stored {
            Ok(released) => released
                .get(&key)
                .copied()
                .ok_or_else(|| DbError::Unavailable(format!("no row for session '{key}'"))),
            Err(e) => Err(DbError::Unavailable(e.to_string())),
        };
        let fenced = matches!(&result, Ok(r) if r.fenced);
        to_free.extend(keeper.settle(&key, &owner, sent, keep, fenced));
        let _ = done.send(result);
    }
    super::keep::free(db, to_free).await;
}
