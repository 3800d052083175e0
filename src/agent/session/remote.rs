//! A session whose transcript is in a shared store ([`SessionBackend`]):
//! brought up to date from it at the start of every turn, reading only
//! what was stored after the last message this process has.

use super::*;

impl Session {
    /// [`resync`](Session::resync) for a shared store: what other
    /// replicas stored since this one's last message is appended to memory
    /// (all of it read again when that message is gone: a compaction, a
    /// reset, a dropped turn), then it is repaired like a file's. Safe
    /// because the turn holds the session's lease: nobody writes under it.
    pub(super) fn resync_remote(&mut self) -> Result<Repairs, SessionError> {
        let remote = self.remote.clone().expect("called for a remote session");
        let key = self.key.clone();
        let io = |doing, source| SessionError::Io {
            key: key.clone(),
            path: remote.describe().into(),
            doing,
            source,
        };
        let read = |e| io("read the transcript", e);
        // The last turn here stored its messages at its end: they follow
        // the last message this process had then (the turn held the lease).
        if let Some(flushed) = remote.take_flushed(&self.key) {
            self.remote_last = match (self.remote_last, flushed) {
                (Some(_), Some(at)) => Some(at),
                _ => None,
            };
        }
        // Nobody has written the session since this process's last turn
        // stored it (the lease said so): what is in memory is all of it.
        let unchanged = remote.unchanged_since_last_turn(&self.key);
        if unchanged && self.remote_last.is_some() {
            self.state.read_unchanged();
            return self
                .repair(Vec::new(), false, &interrupted_result)
                .map_err(|e| io("repair the transcript", e));
        }
        let since = match self.remote_last {
            Some(after) if after > 0 => remote.load_after(&self.key, after).map_err(read)?,
            _ => None,
        };
        let (stored, fresh) = match since {
            Some(stored) => (stored, false),
            None => (remote.load(&self.key).map_err(read)?, true),
        };
        if fresh {
            self.messages = Vec::with_capacity(stored.lines.len());
            self.intact = 0;
        }
        let mut unreadable = Vec::new();
        for line in stored.lines {
            match serde_json::from_str::<Value>(&line) {
                Ok(v) if v.is_object() => self.messages.push(v),
                _ => unreadable.push(line.into_bytes()),
            }
        }
        self.remote_last = Some(stored.last);
        self.started = stored.started || !self.messages.is_empty();
        self.state.read(&self.key, stored.state);
        self.repair(unreadable, false, &interrupted_result)
            .map_err(|e| io("repair the transcript", e))
    }

    /// The shared store this session lives in, if any.
    pub fn backend(&self) -> Option<&Arc<dyn SessionBackend>> {
        self.remote.as_ref()
    }
}
