//! A turn's hold on its session: across processes (an advisory lock on
//! `<key>.jsonl.lock`), or cluster-wide through a shared store's lease;
//! released when the turn ends, after the dialects' per-session state
//! is stored.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

/// The cross-process hold on a session for one turn; released on drop
/// (closing the descriptor releases the `flock`). The lock file stays: removing
/// it would let a waiter lock a file that a newcomer no longer sees.
#[must_use = "the session is locked only while this lives"]
pub struct TurnLock {
    file: Option<File>,
    /// A shared store's hold ([`SessionBackend::hold`]).
    _remote: Option<backend::TurnHold>,
    /// Stores the dialects' per-session state when the turn ends, while
    /// the session is still held (before the fields above are dropped).
    state: Option<state::Saver>,
}

impl TurnLock {
    fn new(
        file: Option<File>,
        remote: Option<backend::TurnHold>,
        state: Option<state::Saver>,
    ) -> TurnLock {
        TurnLock {
            file,
            _remote: remote,
            state,
        }
    }
}

impl Drop for TurnLock {
    fn drop(&mut self) {
        if let Some(saver) = self.state.take() {
            saver.save();
        }
        // No holder to name once released (the lock goes with the descriptor).
        if let Some(file) = &self.file {
            let _ = file.set_len(0);
        }
    }
}

impl Session {
    /// Hold this session against other processes (and other agents of this
    /// one) for a turn, waiting at most `wait` for a turn in progress there
    /// to end. Within one agent, the session's mutex already serialises.
    pub async fn lock_turn(&self, wait: Duration) -> Result<TurnLock, SessionError> {
        if self.in_memory {
            return Ok(TurnLock::new(None, None, None));
        }
        if let Some(remote) = &self.remote {
            let hold = remote.hold(&self.key, wait).await?;
            let saver = self.saver(state::Target::Remote(remote.clone()));
            return Ok(TurnLock::new(None, Some(hold), Some(saver)));
        }
        let path = self.lock_path();
        let io = |doing, source| SessionError::Io {
            key: self.key.clone(),
            path: path.clone(),
            doing,
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("create the sessions directory", e))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io("open the lock file", e))?;
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let waited = started.elapsed();
                    if waited >= wait {
                        return Err(SessionError::Busy {
                            key: self.key.clone(),
                            holder: holder_of(&path),
                            waited: wait,
                        });
                    }
                    let step = Duration::from_millis(25).min(wait - waited);
                    tokio::time::sleep(step).await;
                }
                Err(std::fs::TryLockError::Error(e))
                    if e.kind() == std::io::ErrorKind::Unsupported =>
                {
                    // A filesystem without `flock`: one process per session
                    // cannot be enforced there; say so rather than refuse.
                    tracing::warn!(
                        "{}: advisory locks are not supported here ({e}); \
                         two processes on session '{}' may interleave",
                        path.display(),
                        self.key
                    );
                    let saver = self.saver(state::Target::File(state::file_of(&self.path)));
                    return Ok(TurnLock::new(None, None, Some(saver)));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", e)),
            }
        }
        // Who holds it, for a waiter's message. Best effort: the lock is what counts.
        let _ = file
            .set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        let saver = self.saver(state::Target::File(state::file_of(&self.path)));
        Ok(TurnLock::new(Some(file), None, Some(saver)))
    }

    fn saver(&self, to: state::Target) -> state::Saver {
        state::Saver {
            cell: self.state.clone(),
            key: self.key.clone(),
            to,
        }
    }
}

/// The pid a lock holder wrote into the lock file, if it did yet.
fn holder_of(lock: &Path) -> Option<u32> {
    let mut text = String::new();
    File::open(lock).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
