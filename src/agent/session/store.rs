//! The sessions of one home: where their transcripts live, which are loaded.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;

/// Every session of a host, loaded on first use.
pub struct SessionStore {
    dir: PathBuf,
    open: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
    /// Where named sessions live instead of `dir` (`serve --sessions`).
    backend: std::sync::OnceLock<Arc<dyn SessionBackend>>,
}

impl SessionStore {
    pub fn new(dir: impl Into<PathBuf>) -> SessionStore {
        SessionStore {
            dir: dir.into(),
            open: std::sync::Mutex::new(HashMap::new()),
            backend: std::sync::OnceLock::new(),
        }
    }

    /// A store of its own over the same directory and shared store (a
    /// sub-agent's: its sessions are not this one's loaded sessions, and
    /// live where this one's do).
    pub fn sibling(&self) -> SessionStore {
        let store = SessionStore::new(self.dir.clone());
        if let Some(backend) = self.backend.get() {
            store.use_backend(backend.clone());
        }
        store
    }

    /// Keep named sessions in `backend` from now on (set once, before the
    /// first session is loaded; `false` when one was set already).
    pub fn use_backend(&self, backend: Arc<dyn SessionBackend>) -> bool {
        self.backend.set(backend).is_ok()
    }

    /// The shared store named sessions live in, if not the files.
    pub fn backend(&self) -> Option<&Arc<dyn SessionBackend>> {
        self.backend.get()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The transcript file of `key`.
    pub fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.jsonl", file_stem(key)))
    }

    /// The session of `key`, resumed from disk when it has a transcript.
    /// This read takes no lock and repairs nothing: a turn does both
    /// ([`Session::lock_turn`], [`Session::resync`]).
    pub fn get(&self, key: &str) -> Arc<tokio::sync::Mutex<Session>> {
        let mut open = self.open.lock().expect("session map");
        if let Some(s) = open.get(key) {
            return s.clone();
        }
        let path = self.path_of(key);
        let remote = self.backend.get().cloned();
        // A first look only: every turn reads the store again (from the
        // last message seen here, when every message read was whole).
        let (messages, remote_last) = match &remote {
            Some(remote) => match remote.load(key) {
                Ok(stored) => {
                    let messages: Vec<Value> = stored
                        .lines
                        .iter()
                        .filter_map(|l| serde_json::from_str(l).ok())
                        .collect();
                    let whole = messages.len() == stored.lines.len();
                    (messages, whole.then_some(stored.last))
                }
                Err(e) => {
                    tracing::warn!(
                        "session '{key}': cannot read it from {}: {e}",
                        remote.describe()
                    );
                    (Vec::new(), None)
                }
            },
            None => (load_transcript(&path), None),
        };
        let slots = Arc::<crate::core::hooks::Slots>::default();
        let session = Session {
            intact: 0,
            key: key.to_string(),
            started: !messages.is_empty(),
            messages,
            finalized: false,
            last_active: Instant::now(),
            state: super::state::StateCell::new(slots.clone()),
            slots,
            path,
            synced: None,
            in_memory: false,
            remote,
            remote_last,
        };
        let session = Arc::new(tokio::sync::Mutex::new(session));
        open.insert(key.to_string(), session.clone());
        session
    }

    /// A session of `key` kept in memory only, with `messages` (transcript
    /// form) as its history: no transcript or lock file is written, read or
    /// removed for it. For a key no other turn or process uses (one
    /// request's own conversation); [`unload`](Self::unload) forgets it.
    pub fn open_in_memory(&self, key: &str, messages: Vec<Value>) {
        let slots = Arc::<crate::core::hooks::Slots>::default();
        let session = Session {
            intact: 0,
            key: key.to_string(),
            started: !messages.is_empty(),
            messages,
            finalized: false,
            last_active: Instant::now(),
            state: super::state::StateCell::new(slots.clone()),
            slots,
            path: self.path_of(key),
            synced: None,
            in_memory: true,
            remote: None,
            remote_last: None,
        };
        let session = Arc::new(tokio::sync::Mutex::new(session));
        self.open
            .lock()
            .expect("session map")
            .insert(key.to_string(), session);
    }

    /// A key `<parent>/sub-N` that no session has used, N counting up from
    /// `from`. Its empty transcript is created here, exclusively, so no other
    /// process or agent sharing the sessions directory claims it too: every
    /// `delegate` call starts a fresh conversation. Returns the key and N.
    /// In a shared store ([`use_backend`](Self::use_backend)) the key is
    /// claimed there, so replicas never hand out the same one.
    pub fn claim_subagent_key(&self, parent: &str, from: u64) -> std::io::Result<(String, u64)> {
        let mut n = from.max(1);
        if let Some(remote) = self.backend.get() {
            loop {
                let key = format!("{parent}/sub-{n}");
                if remote.claim(&key)? {
                    return Ok((key, n));
                }
                n += 1;
            }
        }
        std::fs::create_dir_all(&self.dir)?;
        loop {
            let key = format!("{parent}/sub-{n}");
            let path = self.path_of(&key);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(_) => return Ok((key, n)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Sessions loaded in this process.
    pub fn loaded(&self) -> Vec<Arc<tokio::sync::Mutex<Session>>> {
        self.open
            .lock()
            .expect("session map")
            .values()
            .cloned()
            .collect()
    }

    /// Forget a loaded session (it stays on disk).
    pub fn unload(&self, key: &str) {
        self.open.lock().expect("session map").remove(key);
    }
}

/// The longest file stem a session name may take: with `.jsonl` and the
/// longest suffix a session's siblings get (`.aside-<millis>`, `.lock`,
/// an archived `.<millis>.jsonl`), under the 255 bytes of a file name.
pub const MAX_STEM: usize = 220;

/// The file stem of session `key`: the name itself when it is made of
/// `A-Z a-z 0-9 . _ -` (and does not start with `.`), else every other byte
/// (and a leading `.`) as `%XX`; the empty name is `%`. The mapping is
/// one-to-one: a stem with a `%` comes only from a name that needed one,
/// so two names never share a transcript.
pub fn file_stem(key: &str) -> String {
    if key.is_empty() {
        return "%".into();
    }
    let mut stem = String::with_capacity(key.len());
    for (at, byte) in key.bytes().enumerate() {
        let plain =
            byte.is_ascii_alphanumeric() || (b"-_.".contains(&byte) && !(at == 0 && byte == b'.'));
        if plain {
            stem.push(byte as char);
        } else {
            stem.push_str(&format!("%{byte:02X}"));
        }
    }
    stem
}

/// Whether session `key` can be stored: its file stem fits a file name.
/// The reason names the limit and what to do.
pub fn check_name(key: &str) -> Result<(), String> {
    let stem = file_stem(key).len();
    if stem > MAX_STEM {
        return Err(format!(
            "the session name is too long to store ({stem} bytes once each character outside A-Z a-z 0-9 . _ - is written as %XX; at most {MAX_STEM}): use a shorter name"
        ));
    }
    Ok(())
}
