//! Leases a replica keeps between a session's turns.
//!
//! A turn's release keeps its lease for the replica (the row keeps its
//! owner and gets a fresh expiry) instead of freeing it. The session's
//! next turn on this replica, when it comes within a third of the lease's
//! time to live, takes the kept lease over without a statement: nobody
//! else can have taken an unexpired lease, so nobody has written the
//! session, and the turn reads nothing and writes one statement, its end.
//! Sessions routed to one replica (the load balancer hashing the session
//! header, as `deploy/cluster.sh` does) thus cost one statement a turn
//! where a lease taken and released each turn costs two.
//!
//! Another replica that finds a session's lease held asks for it with a
//! `NOTIFY` on [`WANTED_CHANNEL`]; every replica listens
//! ([`Db::listen`](super::Db::listen)), and the one keeping it idle frees
//! it at once (one running a turn frees it at the turn's end instead of
//! keeping it). A replica that dies keeps its sessions until their leases
//! expire, as one that dies mid-turn always did; a replica shutting down
//! frees what it keeps ([`Keeper::kept_owners`]).
//!
//! Safety rests on clocks' rates, not their readings: the local deadline
//! to take a kept lease over is counted from before the release was sent,
//! so it falls before the database's expiry, and the turn that takes it
//! over renews it a third of the time to live later, as any turn does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The channel a replica wanting a held lease notifies, the session's key
/// as the payload.
pub(crate) const WANTED_CHANNEL: &str = "plughost_lease_wanted";

/// Free a kept lease: `$1` key, `$2` the owner keeping it. The row keeps
/// its `last_turn`: this replica's next turn of the session, if nobody
/// wrote it meanwhile, still reads nothing.
pub(crate) const FREE_KEPT: &str = "UPDATE plughost_leases SET owner = NULL, \
     expires_at = '-infinity' WHERE key = $1 AND owner = $2";

/// [`FREE_KEPT`] for many: `$1` keys, `$2` their owners.
pub(crate) const FREE_KEPT_MANY: &str = "UPDATE plughost_leases l SET owner = NULL, \
     expires_at = '-infinity' FROM unnest($1::text[], $2::text[]) AS k(key, owner) \
     WHERE l.key = k.key AND l.owner = k.owner";

/// Free the kept leases `(key, owner)` (asked for, or the replica is
/// shutting down), saying so when it fails: they then expire by themselves.
pub(crate) async fn free(db: &super::Db, leases: Vec<(String, String)>) {
    if leases.is_empty() {
        return;
    }
    let (keys, owners): (Vec<String>, Vec<String>) = leases.into_iter().unzip();
    let freed = db
        .run(move |c| async move {
            let st = c.prepare_cached(FREE_KEPT_MANY).await?;
            Ok(c.execute(&st, &[&keys, &owners]).await?)
        })
        .await;
    if let Err(e) = freed {
        tracing::warn!(
            "cannot free session leases kept by this replica: {e}; they expire by themselves"
        );
    }
}

/// How many sessions' slots are kept before the ones whose leases have
/// expired in the database are forgotten.
const SLOTS_BEFORE_PRUNING: usize = 10_000;

enum Slot {
    /// A turn here holds the lease; `wanted`: another replica asked for it.
    Turn { wanted: bool },
    /// Kept between turns under `owner`.
    Idle {
        owner: String,
        /// A turn starting before this takes the lease over as it is.
        take_over_until: Instant,
        /// The database's expiry is no earlier than this.
        expires_after: Instant,
    },
}

/// How a turn gets a session's lease ([`Keeper::start_turn`]).
pub(crate) enum Start {
    /// This replica keeps it: the turn holds it under `owner` as it is,
    /// renewing it first in `renew_in` (a third of its time to live after
    /// the release that kept it was sent, as for a lease just taken).
    TakeOver { owner: String, renew_in: Duration },
    /// Take it with a statement; `ours`: the owner this replica kept it
    /// under (too close to its expiry to take over as it is), which the
    /// statement may take it from.
    Take { ours: Option<String> },
}

/// What happened to a released lease this replica meant to keep
/// ([`Keeper::settle`]).
enum AfterKeep {
    /// Kept for the session's next turn here.
    Kept,
    /// Another replica asked for it meanwhile: free it now.
    Free,
}

/// One replica's kept leases and the turns holding leases here.
pub(crate) struct Keeper {
    ttl: Duration,
    slots: Mutex<HashMap<String, Slot>>,
}

impl Keeper {
    pub(crate) fn new(ttl: Duration) -> Keeper {
        Keeper {
            ttl,
            slots: Mutex::default(),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn of `key` starts here.
    pub(crate) fn start_turn(&self, key: &str) -> Start {
        let mut slots = self.slots();
        match slots.remove(key) {
            Some(Slot::Idle {
                owner,
                take_over_until,
                ..
            }) => {
                let now = Instant::now();
                if now < take_over_until {
                    slots.insert(key.to_string(), Slot::Turn { wanted: false });
                    Start::TakeOver {
                        owner,
                        renew_in: take_over_until - now,
                    }
                } else {
                    Start::Take { ours: Some(owner) }
                }
            }
            Some(turn @ Slot::Turn { .. }) => {
                // Another turn here holds it: wait for it like any other.
                slots.insert(key.to_string(), turn);
                Start::Take { ours: None }
            }
            None => Start::Take { ours: None },
        }
    }

    /// The statement took `key`'s lease for a turn here.
    pub(crate) fn taken(&self, key: &str) {
        self.slots()
            .insert(key.to_string(), Slot::Turn { wanted: false });
    }

    /// Whether the turn of `key` ending now should keep its lease: nobody
    /// asked for it.
    pub(crate) fn should_keep(&self, key: &str) -> bool {
        matches!(self.slots().get(key), Some(Slot::Turn { wanted: false }))
    }

    /// The release (sent at `sent`) kept `key`'s lease under `owner`.
    fn kept(&self, key: &str, owner: &str, sent: Instant) -> AfterKeep {
        let mut slots = self.slots();
        if !matches!(slots.get(key), Some(Slot::Turn { wanted: false })) {
            slots.remove(key);
            return AfterKeep::Free;
        }
        if slots.len() >= SLOTS_BEFORE_PRUNING {
            let now = Instant::now();
            slots.retain(|_, s| match s {
                Slot::Turn { .. } => true,
                Slot::Idle { expires_after, .. } => *expires_after > now,
            });
        }
        slots.insert(
            key.to_string(),
            Slot::Idle {
                owner: owner.to_string(),
                take_over_until: sent + self.ttl / 3,
                expires_after: sent + self.ttl,
            },
        );
        AfterKeep::Kept
    }

    /// A release meant to keep `key`'s lease (`keep`) or not has run
    /// (sent at `sent`): the lease to free now when it was kept and asked
    /// for meanwhile, as `(key, owner)`.
    pub(crate) fn settle(
        &self,
        key: &str,
        owner: &str,
        sent: Instant,
        keep: bool,
        fenced: bool,
    ) -> Option<(String, String)> {
        if keep && fenced {
            match self.kept(key, owner, sent) {
                AfterKeep::Kept => None,
                AfterKeep::Free => Some((key.to_string(), owner.to_string())),
            }
        } else {
            self.ended(key);
            None
        }
    }

    /// The turn of `key` here ended without keeping its lease.
    pub(crate) fn ended(&self, key: &str) {
        let mut slots = self.slots();
        if matches!(slots.get(key), Some(Slot::Turn { .. })) {
            slots.remove(key);
        }
    }

    /// Something other than a turn needs `key`'s lease here: the owner it
    /// was kept under, to take it from, if it was kept.
    pub(crate) fn give_up(&self, key: &str) -> Option<String> {
        let mut slots = self.slots();
        match slots.remove(key) {
            Some(Slot::Idle { owner, .. }) => Some(owner),
            Some(turn) => {
                slots.insert(key.to_string(), turn);
                None
            }
            None => None,
        }
    }

    /// Another replica asked for `key`'s lease: the owner to free it from
    /// now, when it is kept idle here; a turn here frees it at its end.
    pub(crate) fn wanted(&self, key: &str) -> Option<String> {
        let mut slots = self.slots();
        match slots.get_mut(key) {
            Some(Slot::Turn { wanted }) => {
                *wanted = true;
                None
            }
            Some(Slot::Idle { .. }) => match slots.remove(key) {
                Some(Slot::Idle { owner, .. }) => Some(owner),
                _ => None,
            },
            None => None,
        }
    }

    /// Every lease kept idle here, forgotten (the replica is shutting down
    /// and frees them): `(key, owner)`.
    pub(crate) fn kept_owners(&self) -> Vec<(String, String)> {
        let mut slots = self.slots();
        let idle: Vec<String> = slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Idle { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        idle.into_iter()
            .filter_map(|k| match slots.remove(&k) {
                Some(Slot::Idle { owner, .. }) => Some((k, owner)),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_lease_is_taken_over_by_the_next_turn_and_by_nothing_else() {
        let k = Keeper::new(Duration::from_secs(30));
        assert!(matches!(k.start_turn("s"), Start::Take { ours: None }));
        k.taken("s");
        assert!(k.should_keep("s"));
        assert!(matches!(
            k.kept("s", "r#1", Instant::now()),
            AfterKeep::Kept
        ));
        match k.start_turn("s") {
            Start::TakeOver { owner, renew_in } => {
                assert_eq!(owner, "r#1");
                assert!(renew_in <= Duration::from_secs(10), "{renew_in:?}");
            }
            Start::Take { .. } => panic!("not taken over"),
        }
        // A second turn of the session here waits for the first.
        assert!(matches!(k.start_turn("s"), Start::Take { ours: None }));
    }

    #[test]
    fn a_kept_lease_near_its_expiry_is_taken_with_a_statement() {
        let k = Keeper::new(Duration::from_millis(30));
        k.taken("s");
        let sent = Instant::now() - Duration::from_millis(20);
        assert!(matches!(k.kept("s", "r#1", sent), AfterKeep::Kept));
        match k.start_turn("s") {
            Start::Take { ours } => assert_eq!(ours.as_deref(), Some("r#1")),
            Start::TakeOver { .. } => panic!("taken over past a third of its time"),
        }
    }

    #[test]
    fn a_lease_asked_for_is_freed_idle_at_once_and_running_at_its_end() {
        let k = Keeper::new(Duration::from_secs(30));
        k.taken("idle");
        k.kept("idle", "r#1", Instant::now());
        assert_eq!(k.wanted("idle").as_deref(), Some("r#1"));
        assert!(matches!(k.start_turn("idle"), Start::Take { ours: None }));

        k.taken("busy");
        assert_eq!(k.wanted("busy"), None);
        assert!(!k.should_keep("busy"));
        // Asked for between the decision to keep and the release's answer.
        k.taken("late");
        assert!(k.should_keep("late"));
        k.wanted("late");
        assert!(matches!(
            k.kept("late", "r#2", Instant::now()),
            AfterKeep::Free
        ));
        assert_eq!(k.wanted("unknown"), None);
    }

    #[test]
    fn giving_up_and_shutting_down_return_what_was_kept() {
        let k = Keeper::new(Duration::from_secs(30));
        for key in ["a", "b", "c"] {
            k.taken(key);
        }
        k.kept("a", "r#1", Instant::now());
        k.kept("b", "r#2", Instant::now());
        assert_eq!(k.give_up("a").as_deref(), Some("r#1"));
        assert_eq!(k.give_up("c"), None, "a turn holds c");
        assert_eq!(k.kept_owners(), vec![("b".to_string(), "r#2".to_string())]);
        assert!(k.kept_owners().is_empty());
    }
}
