//! A session whose transcript is in a shared store ([`SessionBackend`]):
//! brought up to date from it at the start of every turn.

use super::*;

impl Session {
    /// [`resync`](Session::resync) for a shared store: the stored
    /// transcript replaces memory (another replica may have run turns
    /// since), then it is repaired like a file's.
    pub(super) fn resync_remote(&mut self) -> Result<Repairs, SessionError> {
        let remote = self.remote.clone().expect("called for a remote session");
        let key = self.key.clone();
        let io = |doing, source| SessionError::Io {
            key: key.clone(),
            path: remote.describe().into(),
            doing,
            source,
        };
        let stored = remote
            .load(&self.key)
            .map_err(|e| io("read the transcript", e))?;
        let mut unreadable = Vec::new();
        self.messages = Vec::with_capacity(stored.lines.len());
        for line in stored.lines {
            match serde_json::from_str::<Value>(&line) {
                Ok(v) if v.is_object() => self.messages.push(v),
                _ => unreadable.push(line.into_bytes()),
            }
        }
        self.started = stored.started || !self.messages.is_empty();
        self.repair(unreadable, false, &interrupted_result)
            .map_err(|e| io("repair the transcript", e))
    }

    /// The shared store this session lives in, if any.
    pub fn backend(&self) -> Option<&Arc<dyn SessionBackend>> {
        self.remote.as_ref()
    }
}
