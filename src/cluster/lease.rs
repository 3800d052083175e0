//! A lease per session: a row of `plughost_leases` with an owner and an
//! expiry, taken before a turn, renewed while it runs, and released (with
//! the turn's messages marked complete, in the same statement) when it
//! ends. A released row stays, with no owner and long expired, naming the
//! turn that last released it having stored its writes (`last_turn`):
//! taking the lease returns that name, so a replica whose own turn it was
//! knows nobody has written the session since ([`SessionLease::last_turn`]).
//! Every other writer of a session clears the name.
//!
//! Why a row and not `pg_advisory_lock`: an advisory lock belongs to a
//! database connection, and a replica multiplexes all its turns over one;
//! two turns of one replica would both "hold" it. A row names the turn
//! that holds it, survives a reconnect, and expires by itself when its
//! replica dies (after at most its time to live), which a waiter on
//! another replica can see and take over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::db::{interval, Db, DbError};
use super::keep::{Keeper, Start, FREE_KEPT, WANTED_CHANNEL};
use super::release_batch::{Release, ReleaseBatch};

/// How often a turn waiting for a held lease asks its holder again to free
/// it (a holder running a turn frees it at the turn's end; a notification
/// can be missed while a replica reconnects).
const ASK_AGAIN: Duration = Duration::from_millis(500);

/// Take `key`'s lease for owner `$2` for `$3` (an interval), unless an
/// unexpired one is held: a row comes back only when it was taken, with
/// the owner it was taken from when that one had not released it (its turn
/// died: [`DROP_DEAD`] its pending messages). For the session store's
/// writes outside any turn.
/// `$4`: the owner this replica kept the lease under between turns
/// ([`super::keep`]), taken from even unexpired (`''` for none).
pub(crate) const TAKE_LEASE: &str = "INSERT INTO plughost_leases (key, owner, expires_at) \
     VALUES ($1, $2, now() + $3::text::interval) \
     ON CONFLICT (key) DO UPDATE \
     SET owner = excluded.owner, expires_at = excluded.expires_at, \
     taken_from = nullif(plughost_leases.owner, $4) \
     WHERE plughost_leases.expires_at < now() OR plughost_leases.owner = $4 RETURNING taken_from";

/// [`TAKE_LEASE`] for a turn. Returns the turn that last released the
/// lease and the owner it was taken from (set when that one held it
/// unreleased: a turn that died, whose pending messages the new turn must
/// delete before reading, [`DROP_DEAD`]). Both are read from the row's
/// latest version, which `ON CONFLICT DO UPDATE` locks even when it was
/// committed after this statement's snapshot (a release it waited for):
/// they are never stale, where a read of the messages in the same
/// statement could be.
const TAKE_TURN_LEASE: &str = "INSERT INTO plughost_leases (key, owner, expires_at) \
     VALUES ($1, $2, now() + $3::text::interval) \
     ON CONFLICT (key) DO UPDATE \
     SET owner = excluded.owner, expires_at = excluded.expires_at, \
     taken_from = nullif(plughost_leases.owner, $4) \
     WHERE plughost_leases.expires_at < now() OR plughost_leases.owner = $4 \
     RETURNING last_turn, taken_from";

/// The pending messages a turn that died under an earlier lease of `$1`
/// left, deleted by the turn `$2` that took the lease over.
pub(crate) const DROP_DEAD: &str =
    "DELETE FROM plughost_messages WHERE key = $1 AND pending AND turn <> $2";

/// Release a turn's lease: what it held back stored (complete at once,
/// fenced by the lease), its messages written before marked complete, the
/// idempotency answer stored, the lease released naming this turn as the
/// last writer — one statement, so a replica that dies between them leaves
/// all or none. `$5`: the session row is written (the turn stored
/// something); `$6`: the lease's new time to live when this replica keeps
/// it for the session's next turn ([`super::keep`]), `NULL` to free it;
/// `$7..$11`: the answer. Returns how many messages were
/// stored, the last one's `seq`, and whether the lease was still this
/// turn's. The parts are shared with [`RELEASE_PLAIN`].
///
/// The release's own `UPDATE` is the fence: it takes the lease row's
/// latest version (waiting for a replica taking the lease over meanwhile),
/// so a turn whose lease was taken stores nothing, where a `SELECT` in the
/// statement's snapshot could still see the lease held; and it costs one
/// lookup of the row where a `SELECT` and the `UPDATE` cost two (the
/// two statements of a turn about an eighth faster with pgbench).
macro_rules! release_statement {
    ($answer:literal) => {
        concat!(
            "WITH gone AS (UPDATE plughost_leases SET owner = CASE WHEN $6::text IS NULL THEN NULL ELSE owner END, \
             expires_at = coalesce(now() + $6::text::interval, '-infinity'), last_turn = $2 \
             WHERE key = $1 AND owner = $2 RETURNING 1), \
             s AS (INSERT INTO plughost_sessions (key, started, state) SELECT $1, true, $4 FROM gone WHERE $5 \
             ON CONFLICT (key) DO UPDATE SET started = true, \
             state = coalesce(excluded.state, plughost_sessions.state) \
             WHERE NOT plughost_sessions.started OR excluded.state IS NOT NULL), ",
            $answer,
            "m AS (INSERT INTO plughost_messages (key, turn, pending, body) \
             SELECT $1, $2, false, t.b FROM gone, unnest($3::text[]) WITH ORDINALITY AS t(b, n) \
             ORDER BY t.n RETURNING seq) \
             SELECT count(*), coalesce(max(seq), 0), EXISTS (SELECT 1 FROM gone) FROM m"
        )
    };
}
/// The release statement with the idempotency answer. The answer is
/// fenced too: a turn whose lease was taken stores no answer
/// and gives its claim up, so a retry with the same key runs the turn again
/// instead of replaying an answer whose messages were never stored.
const RELEASE: &str = release_statement!(
    "done AS (UPDATE plughost_messages SET pending = false WHERE key = $1 AND turn = $2 AND pending), \
     answer AS (UPDATE plughost_idempotency SET status = $9, response = $10, \
     expires_at = now() + $11::text::interval WHERE key = $7 AND owner = $8 AND EXISTS (SELECT 1 FROM gone)), \
     unclaimed AS (DELETE FROM plughost_idempotency WHERE key = $7 AND owner = $8 AND status IS NULL \
     AND NOT EXISTS (SELECT 1 FROM gone)), "
);

/// [`RELEASE`] with no answer to store, for a turn that held back all its
/// messages (a lease handed to its turn: nothing of it is pending), the
/// end of every chat request without an `Idempotency-Key`: two parts of
/// the statement fewer to run (about an eighth of its time).
const RELEASE_PLAIN: &str = release_statement!("");

/// What a turn held back until its end ([`SessionLease::release_with`]):
/// its messages (JSON text, in order) and its dialects' state.
#[derive(Debug, Default)]
pub struct TurnWrites {
    pub lines: Vec<String>,
    pub state: Option<String>,
}

/// What a turn's release stored ([`SessionLease::release_with`]).
#[derive(Debug, Clone, Copy)]
pub struct Released {
    /// How many of its messages were stored: all, or none when the lease
    /// was no longer this turn's.
    pub stored: i64,
    /// The `seq` of the last one.
    pub last: i64,
    /// The lease was still this turn's: what it wrote is stored and it is
    /// the session's last writer.
    pub fenced: bool,
}

pub(crate) async fn release(
    c: &super::db::Conn,
    key: &str,
    owner: &str,
    writes: TurnWrites,
    answer: Option<super::idempotency::Answer>,
    keep_for: Option<String>,
) -> Result<Released, DbError> {
    let session_row = !writes.lines.is_empty() || writes.state.is_some();
    let turn: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
        &key,
        &owner,
        &writes.lines,
        &writes.state,
        &session_row,
        &keep_for,
    ];
    let row = match answer {
        None => {
            let st = c.prepare_cached(RELEASE_PLAIN).await?;
            c.query_one(&st, &turn).await?
        }
        Some(a) => {
            let st = c.prepare_cached(RELEASE).await?;
            let answer: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&a.key, &a.owner, &a.status, &a.body, &a.window];
            let params: Vec<_> = turn.iter().chain(answer.iter()).copied().collect();
            c.query_one(&st, &params).await?
        }
    };
    Ok(Released {
        stored: row.get(0),
        last: row.get(1),
        fenced: row.get(2),
    })
}

/// [`release`], then the keeper told what became of the lease (kept, or
/// ended), freeing it on the same connection when it was kept and another
/// replica asked for it meanwhile: one release's whole end, run to its end
/// by a task of its own whatever becomes of the turn's caller.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release_settled(
    c: &super::db::Conn,
    key: &str,
    owner: &str,
    writes: TurnWrites,
    answer: Option<super::idempotency::Answer>,
    keep_for: Option<String>,
    keeper: &Keeper,
    sent: Instant,
) -> Result<Released, DbError> {
    let keep = keep_for.is_some();
    let released = release(c, key, owner, writes, answer, keep_for).await;
    let fenced = matches!(&released, Ok(r) if r.fenced);
    if let Some((k, o)) = keeper.settle(key, owner, sent, keep, fenced) {
        // The release itself stands whatever becomes of this.
        if let Err(e) = c.execute(FREE_KEPT, &[&k, &o]).await {
            tracing::warn!("session '{k}': cannot free its lease for another replica: {e}; it expires by itself");
        }
    }
    released
}

/// Why a lease was not had.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another turn (on this replica or another) holds it and did not end
    /// within the wait.
    #[error("session '{key}' has a turn running on another replica (it did not end within {} s)", waited.as_secs_f64())]
    Busy { key: String, waited: Duration },
    #[error(transparent)]
    Db(#[from] DbError),
}

/// A turn's hold on a session, cluster-wide. Renewed in the background
/// every third of its time to live; dropping it marks the turn's messages
/// complete and releases the session, both before `drop` returns.
#[must_use = "the session is leased only while this lives"]
pub struct SessionLease {
    db: Arc<Db>,
    keeper: Arc<Keeper>,
    batch: Arc<ReleaseBatch>,
    ttl: Duration,
    key: String,
    owner: String,
    lost: Arc<AtomicBool>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    released: bool,
    /// The turn that last released it having stored its writes, if known.
    last_turn: Option<String>,
}

impl SessionLease {
    /// Take the lease of `key` for the turn `owner`, polling while another
    /// holds it, at most `wait`; taken, the pending messages of a turn that
    /// died under an earlier lease are gone. A lease this replica kept
    /// since the session's last turn here is taken over as it is, under
    /// the owner it was kept for, without a statement ([`super::keep`]).
    pub(crate) async fn acquire(
        (db, keeper, batch): (&Arc<Db>, &Arc<Keeper>, &Arc<ReleaseBatch>),
        key: &str,
        owner: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<SessionLease, LeaseError> {
        let ours = match keeper.start_turn(key) {
            Start::TakeOver { owner, renew_in } => {
                let mut lease = SessionLease::held((db, keeper, batch), key, &owner, ttl, renew_in);
                // It released the lease having stored its writes, and
                // nobody could take it since.
                lease.last_turn = Some(owner);
                return Ok(lease);
            }
            Start::Take { ours } => ours.unwrap_or_default(),
        };
        let started = Instant::now();
        let mut step = Duration::from_millis(2);
        let mut asked: Option<Instant> = None;
        loop {
            let (k, o, t, ours) = (
                key.to_string(),
                owner.to_string(),
                interval(ttl),
                ours.clone(),
            );
            let ask = asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN);
            let got = db
                .run(move |c| async move {
                    let st = c.prepare_cached(TAKE_TURN_LEASE).await?;
                    let Some(row) = c.query_opt(&st, &[&k, &o, &t, &ours]).await? else {
                        if ask {
                            // Held: ask a replica keeping it idle to free it.
                            c.execute("SELECT pg_notify($1, $2)", &[&WANTED_CHANNEL, &k])
                                .await?;
                        }
                        return Ok(None);
                    };
                    let (last_turn, taken_from): (Option<String>, Option<String>) =
                        (row.get(0), row.get(1));
                    if taken_from.is_some() {
                        // Held, then not released: its turn died.
                        let st = c.prepare_cached(DROP_DEAD).await?;
                        c.execute(&st, &[&k, &o]).await?;
                    }
                    Ok(Some(last_turn))
                })
                .await?;
            if let Some(last_turn) = got {
                keeper.taken(key);
                let mut lease = SessionLease::held((db, keeper, batch), key, owner, ttl, ttl / 3);
                lease.last_turn = last_turn;
                return Ok(lease);
            }
            if ask {
                asked = Some(Instant::now());
            }
            let waited = started.elapsed();
            if waited >= wait {
                return Err(LeaseError::Busy {
                    key: key.to_string(),
                    waited: wait,
                });
            }
            tokio::time::sleep(step.min(wait - waited)).await;
            step = (step * 2).min(Duration::from_millis(25));
        }
    }

    fn held(
        (db, keeper, batch): (&Arc<Db>, &Arc<Keeper>, &Arc<ReleaseBatch>),
        key: &str,
        owner: &str,
        ttl: Duration,
        first_renewal: Duration,
    ) -> SessionLease {
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let lost = Arc::new(AtomicBool::new(false));
        let (pool, k, o, t, flag) = (
            db.clone(),
            key.to_string(),
            owner.to_string(),
            interval(ttl),
            lost.clone(),
        );
        db.spawn_nearby(async move {
            let mut next = first_renewal;
            loop {
                tokio::select! {
                    _ = &mut stop_rx => return,
                    _ = tokio::time::sleep(next) => {}
                }
                next = ttl / 3;
                let (k2, o2, t2) = (k.clone(), o.clone(), t.clone());
                let renewed = pool
                    .run(move |c| async move {
                        Ok(c.execute(
                            "UPDATE plughost_leases SET expires_at = now() + $3::text::interval \
                             WHERE key = $1 AND owner = $2",
                            &[&k2, &o2, &t2],
                        )
                        .await?)
                    })
                    .await;
                if !matches!(renewed, Ok(1)) {
                    tracing::warn!("session '{k}': lost its lease ({renewed:?}); the turn's writes are refused from now on");
                    flag.store(true, Ordering::SeqCst);
                    return;
                }
            }
        });
        SessionLease {
            db: db.clone(),
            keeper: keeper.clone(),
            batch: batch.clone(),
            ttl,
            key: key.to_string(),
            owner: owner.to_string(),
            lost,
            stop: Some(stop_tx),
            released: false,
            last_turn: None,
        }
    }

    /// Release it as [`drop`](Drop) does, and in the same statement store
    /// `answer` for the idempotency key it answers: a replica that dies
    /// between the two can then neither lose the answer of a complete turn
    /// nor let a retry run the turn again.
    pub async fn release_answering(
        self,
        answer: super::idempotency::Answer,
    ) -> Result<(), DbError> {
        self.release_with(TurnWrites::default(), Some(answer))
            .await
            .map(|_| ())
    }

    /// Release it from async code, storing in the same statement what its
    /// turn held back (`writes`, complete at once) and `answer`, if any:
    /// one round trip ends a turn, and no runtime thread is parked on it.
    /// Returns how many of `writes.lines` were stored (fewer when the lease
    /// was lost: none are then) and the `seq` of the last one.
    pub async fn release_with(
        mut self,
        writes: TurnWrites,
        answer: Option<super::idempotency::Answer>,
    ) -> Result<Released, DbError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.released = true;
        let (k, o) = (self.key.clone(), self.owner.clone());
        // Kept only by a turn that stores messages: its session's row is
        // then there, so nothing outside a turn (an import) writes the
        // session while this replica would take it over unread.
        let keep = !writes.lines.is_empty() && self.keeper.should_keep(&k);
        let keep_for = keep.then(|| interval(self.ttl));
        let sent = Instant::now();
        let keeper = self.keeper.clone();
        let on_multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let released = match answer {
            // A plain release goes with those of other sessions ending now.
            None if on_multi_thread => {
                let (done, result) = tokio::sync::oneshot::channel();
                self.batch.send(Release {
                    key: k,
                    owner: o,
                    writes,
                    keep_for,
                    keeper,
                    sent,
                    done,
                });
                result.await.unwrap_or(Err(DbError::Gone))
            }
            answer => {
                self.db
                    .run(move |c| async move {
                        release_settled(&c, &k, &o, writes, answer, keep_for, &keeper, sent).await
                    })
                    .await
            }
        };
        if released.is_err() {
            // No connection to run it on: nothing was kept.
            self.keeper.ended(&self.key);
        }
        released
    }

    /// [`release_with`](Self::release_with) from synchronous code (a
    /// request that ends without an answer), waiting for the statement.
    pub fn release_with_now(mut self, writes: TurnWrites) -> Result<Released, DbError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.released = true;
        self.keeper.ended(&self.key);
        let (k, o) = (self.key.clone(), self.owner.clone());
        self.db
            .block(move |c| async move { release(&c, &k, &o, writes, None, None).await })
    }

    /// The turn holding it (the owner written into its messages).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The turn that released the lease before this one took it, when that
    /// turn stored all it wrote and no other writer has touched the session
    /// since (each clears it).
    pub fn last_turn(&self) -> Option<&str> {
        self.last_turn.as_deref()
    }

    /// A renewal found the lease taken or gone.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if self.released {
            return;
        }
        self.keeper.ended(&self.key);
        let (k, o) = (self.key.clone(), self.owner.clone());
        // Synchronous: the answer of the turn goes out only once its
        // messages are complete for every replica.
        let released = self.db.block(move |c| async move {
            let st = c
                .prepare_cached(
                    "WITH done AS (UPDATE plughost_messages SET pending = false \
                     WHERE key = $1 AND turn = $2 AND pending) \
                     UPDATE plughost_leases SET owner = NULL, expires_at = '-infinity', last_turn = NULL \
                     WHERE key = $1 AND owner = $2",
                )
                .await?;
            c.execute(&st, &[&k, &o]).await?;
            Ok(())
        });
        if let Err(e) = released {
            tracing::warn!(
                "session '{}': cannot release its lease: {e}; it expires by itself",
                self.key
            );
        }
    }
}
