//! Idle named sessions of `plughost serve` (`X-Plughost-Session`): a
//! session no request has used for `--session-idle` is finalized as at
//! shutdown (`on_session_finalize`) and unloaded, so a long-running server
//! does not keep every conversation it ever had in memory. Its transcript
//! stays on disk: a later request with the same name resumes it (as after a
//! restart, `on_session_start` does not fire again).
//!
//! Never while a request on the session runs: every request holds a read
//! side of the session's gate for its whole turn, and eviction needs the
//! write side without waiting for it ([`tokio::sync::RwLock::try_write`]),
//! so a busy session is simply skipped until the next sweep. A request
//! arriving during an eviction waits for it, then finds the session
//! unloaded and resumes it from disk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;

/// The default `--session-idle`: half an hour.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(1800);

struct Entry {
    /// Read: a request is using the session. Write: it is being evicted.
    gate: Arc<RwLock<()>>,
    /// When the last request on it ended (or the first one began).
    last_used: Mutex<Instant>,
}

impl Entry {
    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

/// A request's use of a named session; dropping it marks the session used now.
pub struct InUse {
    entry: Arc<Entry>,
    _read: OwnedRwLockReadGuard<()>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        // Runs before the read guard is released: an eviction that gets the
        // gate next sees the session as just used.
        *self
            .entry
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// The named sessions requests have used, and when.
pub struct NamedSessions {
    /// `None`: never evicted (`--session-idle 0`).
    idle: Option<Duration>,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

impl NamedSessions {
    pub fn new(idle: Option<Duration>) -> NamedSessions {
        NamedSessions {
            idle,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// How long a session may go unused before it is evicted.
    pub fn idle(&self) -> Option<Duration> {
        self.idle
    }

    /// Mark `name` in use for as long as the result lives (waiting for an
    /// eviction of it in progress to finish).
    pub async fn enter(&self, name: &str) -> InUse {
        let fresh = || {
            Arc::new(Entry {
                gate: Arc::new(RwLock::new(())),
                last_used: Mutex::new(Instant::now()),
            })
        };
        let entry = if self.idle.is_none() {
            // Nothing is ever evicted: nothing to track (the map would
            // only grow, a name per session ever seen).
            fresh()
        } else {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries
                .entry(name.to_string())
                .or_insert_with(fresh)
                .clone()
        };
        let read = entry.gate.clone().read_owned().await;
        InUse { entry, _read: read }
    }

    /// Finalize and unload every named session unused for the idle time
    /// and not in use now; how many were evicted.
    pub async fn evict_idle(&self, agent: &Agent) -> usize {
        let Some(idle) = self.idle else { return 0 };
        let candidates: Vec<(String, Arc<Entry>)> = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, e)| e.idle_for() >= idle)
            .map(|(name, e)| (name.clone(), e.clone()))
            .collect();
        let mut evicted = 0;
        for (name, entry) in candidates {
            // A request holds it: in use, not idle.
            let Ok(_evicting) = entry.gate.clone().try_write_owned() else {
                continue;
            };
            // A request may have ended between the listing and now.
            if entry.idle_for() < idle {
                continue;
            }
            agent.finalize_session(&name).await;
            evicted += 1;
            tracing::info!(
                "session '{name}' evicted after {} s unused (its transcript stays on disk)",
                idle.as_secs_f64()
            );
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            // Only the map and this sweep hold it: no request is waiting
            // for the gate, so the entry can go (a waiting request keeps it,
            // and the session is swept again once that request is done).
            if Arc::strong_count(&entry) == 2 {
                entries.remove(&name);
            }
        }
        evicted
    }
}

/// How often the sweep looks: a quarter of the idle time, between 10 ms
/// and a minute.
fn tick(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(60))
}

/// Evict idle named sessions until `stop` is cancelled (nothing to do
/// when eviction is off).
pub async fn sweep(named: Arc<NamedSessions>, agent: Agent, stop: CancellationToken) {
    let Some(idle) = named.idle() else { return };
    let every = tick(idle);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        named.evict_idle(&agent).await;
    }
}

#[cfg(test)]
mod tests {
    use super::{tick, NamedSessions};
    use std::time::Duration;

    #[tokio::test]
    async fn sessions_are_tracked_only_when_they_can_be_evicted() {
        let never = NamedSessions::new(None);
        let idle = NamedSessions::new(Some(Duration::from_secs(60)));
        for name in ["a", "b", "a"] {
            drop(never.enter(name).await);
            drop(idle.enter(name).await);
        }
        // `--session-idle 0`: nothing to evict, so nothing grows per name.
        assert_eq!(never.entries.lock().unwrap().len(), 0);
        assert_eq!(idle.entries.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_sweep_ticks_within_bounds() {
        assert_eq!(tick(Duration::from_secs(1800)), Duration::from_secs(60));
        assert_eq!(tick(Duration::from_secs(2)), Duration::from_millis(500));
        assert_eq!(tick(Duration::from_millis(1)), Duration::from_millis(10));
    }
}
