//! The dialects' per-session state that must outlive the process holding
//! the session (a replica that dies, a request that lands on another):
//! kept in the session's slots while it is loaded, stored beside its
//! transcript at the end of each turn (before the turn's hold on the
//! session is released), and put back into the slots when a turn finds
//! another value stored (another process ran a turn since).
//!
//! An isolated plugin's state is kept in its worker; the worker is handed
//! the state as the turn started and reports it back when a hook changed
//! it ([`SessionStates`]), and the reports join the slots before the
//! state is stored, so the store sees no difference.
//!
//! What is stored is one JSON object by dialect name, each dialect
//! exporting and importing its own value ([`dialect_states`]). Where it is
//! stored: the `state` column of the session's row in PostgreSQL, or
//! `<key>.jsonl.state` beside the transcript file (replaced atomically).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::SessionBackend;
use crate::core::hooks::Slots;
use crate::isolation::proxy::SessionStates;

/// Every dialect whose per-session state outlives the process, with its
/// name ([`crate::dialects::SessionState`]). Hermes keeps none
/// outside the transcript here: its `is_first_turn` is read from the
/// transcript, and its memory provider is a per-process object that every
/// process initialises for the session (as Hermes does in each agent
/// process).
fn dialect_states() -> impl Iterator<Item = (&'static str, crate::dialects::SessionState)> {
    crate::dialects::DIALECTS
        .iter()
        .filter_map(|d| d.abilities().session_state.map(|s| (d.name(), s)))
}

/// The state of every dialect in `slots`, as stored (`None`: nothing).
pub(super) fn export(slots: &Slots) -> Option<String> {
    let mut all = Map::new();
    for (name, state) in dialect_states() {
        if let Some(v) = (state.export)(slots) {
            all.insert(name.to_string(), v);
        }
    }
    (!all.is_empty()).then(|| Value::Object(all).to_string())
}

/// Put the stored `text` back into `slots` (a dialect it does not name
/// keeps what it has). Unreadable text is logged and ignored.
pub(super) fn import(key: &str, slots: &Slots, text: &str) {
    let all = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(all)) => all,
        _ => {
            tracing::warn!(
                "session '{key}': its stored dialect state is not a JSON object; ignored"
            );
            return;
        }
    };
    for (name, state) in dialect_states() {
        if let Some(v) = all.get(name) {
            (state.import)(slots, v);
        }
    }
}

/// A session's slots and the state text last stored or read for them.
#[derive(Default)]
pub(super) struct StateCell {
    inner: Mutex<(Arc<Slots>, Option<String>)>,
}

impl StateCell {
    pub(super) fn new(slots: Arc<Slots>) -> Arc<StateCell> {
        Arc::new(StateCell {
            inner: Mutex::new((slots, None)),
        })
    }

    /// The session started over with `slots` (and nothing stored).
    pub(super) fn reset(&self, slots: Arc<Slots>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = (slots, None);
    }

    /// `stored` was read for the session at a turn's start: imported when
    /// it is not what this process has (what isolated workers reported
    /// and no turn's end stored goes in first: the stored value is the
    /// later one); what the slots then hold is what the turn's isolated
    /// workers are handed.
    pub(super) fn read(&self, key: &str, stored: Option<String>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        SessionStates::settle(&inner.0);
        if let Some(text) = &stored {
            if inner.1.as_ref() != Some(text) {
                import(key, &inner.0, text);
            }
        }
        inner.1 = stored;
        SessionStates::turn_begins(&inner.0);
    }

    /// A turn begins on the state as last read or stored here: the store
    /// said nobody has written the session since.
    pub(super) fn read_unchanged(&self) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        SessionStates::settle(&inner.0);
        SessionStates::turn_begins(&inner.0);
    }

    /// The state to store now, when it changed since read or stored
    /// (isolated workers' reports of the turn included).
    fn changed(&self) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        SessionStates::settle(&inner.0);
        export(&inner.0).filter(|text| inner.1.as_ref() != Some(text))
    }

    fn stored(&self, text: String) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(text);
    }
}

/// Where a turn's end stores the state.
pub(super) enum Target {
    File(PathBuf),
    Remote(Arc<dyn SessionBackend>),
}

/// Held by a turn's lock: stores the state when the turn ends.
pub(super) struct Saver {
    pub(super) cell: Arc<StateCell>,
    pub(super) key: String,
    pub(super) to: Target,
}

impl Saver {
    /// Store the state if it changed; a failure is logged (the turn's
    /// messages are stored; only the dialect state is behind).
    pub(super) fn save(&self) {
        let Some(text) = self.cell.changed() else {
            return;
        };
        let saved = match &self.to {
            Target::File(path) => write_file(path, &text),
            Target::Remote(remote) => remote.save_state(&self.key, &text),
        };
        match saved {
            Ok(()) => self.cell.stored(text),
            Err(e) => tracing::warn!(
                "session '{}': cannot store its dialect state: {e}",
                self.key
            ),
        }
    }
}

/// `<transcript>.state`, the state file of a transcript file.
pub(super) fn file_of(transcript: &Path) -> PathBuf {
    super::sibling(transcript, ".state")
}

/// The state file's text (`None` when there is none).
pub(super) fn read_file(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replace the state file with `text` atomically.
fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".state.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
