//! Sessions: one transcript per session key, persisted as JSON Lines under
//! `<home>/sessions/`, appended and flushed per message so a crash loses at
//! most the message in flight, and resumed from disk after a restart.
//!
//! A turn owns its session across processes: [`Session::lock_turn`] takes an
//! advisory lock on `<key>.jsonl.lock` (the transcript itself is replaced by
//! compaction and repairs, so it cannot carry the lock), and
//! [`Session::resync`] then reads what other processes wrote and repairs
//! what a crash left: a torn or unreadable line is set aside into
//! `<key>.jsonl.aside-<millis>`, and a tool call with no result is answered
//! with [`interrupted_result`], so the next request is one an
//! OpenAI-compatible API accepts.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The result a tool call gets when the transcript shows it was asked for
/// but never answered: plughost stopped (crash, `kill -9`, power loss)
/// between the call and its result. Whether the call had any effect is
/// unknown, and the text says so only by saying it did not finish.
pub fn interrupted_result(tool: &str) -> String {
    format!("Error executing {tool}: interrupted (plughost stopped before the call finished)")
}

/// Why a session could not be used for a turn.
#[derive(Debug)]
pub enum SessionError {
    /// Another process (or another agent in this one) holds the session's
    /// turn lock and did not release it in time.
    Busy {
        key: String,
        holder: Option<u32>,
        waited: Duration,
    },
    /// The transcript or its lock file could not be read or written.
    Io {
        key: String,
        path: PathBuf,
        doing: &'static str,
        source: std::io::Error,
    },
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Busy {
                key,
                holder,
                waited,
            } => {
                let who = match holder {
                    Some(pid) => format!("another plughost process (pid {pid})"),
                    None => "another plughost process".to_string(),
                };
                write!(
                    f,
                    "session '{key}' is in use by {who}: its turn did not end within {} s. \
                     Try again when it has finished, or use another session (--session NAME)",
                    waited.as_secs_f64()
                )
            }
            SessionError::Io {
                key,
                path,
                doing,
                source,
            } => write!(
                f,
                "cannot {doing} for session '{key}' ({}): {source}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Io { source, .. } => Some(source),
            SessionError::Busy { .. } => None,
        }
    }
}

/// What [`Session::resync`] repaired.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Tool calls answered with [`interrupted_result`] (or the caller's text).
    pub answered: usize,
    /// Lines and misplaced tool results moved into the side file.
    pub set_aside: usize,
    /// Where they went.
    pub side_file: Option<PathBuf>,
}

/// What this process last saw of the transcript on disk: when the file is
/// still this one (same inode, same length), memory is up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DiskState {
    Missing,
    Present { dev: u64, ino: u64, len: u64 },
}

impl DiskState {
    fn of(meta: &std::fs::Metadata) -> DiskState {
        DiskState::Present {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
        }
    }

    /// Where the file grew from, when `now` is this file with more at its end.
    fn grown_to(self, now: DiskState) -> Option<u64> {
        match (self, now) {
            (
                DiskState::Present { dev, ino, len },
                DiskState::Present {
                    dev: d,
                    ino: i,
                    len: l,
                },
            ) if dev == d && ino == i && l > len => Some(len),
            _ => None,
        }
    }

    fn at(path: &Path) -> std::io::Result<DiskState> {
        match std::fs::metadata(path) {
            Ok(meta) => Ok(DiskState::of(&meta)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DiskState::Missing),
            Err(e) => Err(e),
        }
    }
}

fn now_ts() -> f64 {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    (ts * 1000.0).round() / 1000.0
}

fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

/// One conversation.
pub struct Session {
    pub key: String,
    /// OpenAI-format messages, without hook patches. Outside this module
    /// they are only appended to: a repair goes over what follows the part
    /// it left intact (the private `intact` count).
    pub messages: Vec<Value>,
    /// How many messages at the start of `messages` the last repair left
    /// intact; set to 0 wherever they are replaced.
    intact: usize,
    /// `on_session_start` has fired (or the session was resumed from disk).
    pub started: bool,
    /// `on_session_finalize` has fired.
    pub finalized: bool,
    pub last_active: Instant,
    /// The dialects' per-session state while the session is loaded (its
    /// turns reach it through [`TurnScope::session_slot`](crate::core::hooks::TurnScope::session_slot));
    /// `/new` starts it over with the transcript.
    pub slots: Arc<crate::core::hooks::Slots>,
    path: PathBuf,
    /// The transcript as of this process's last read or write; `None` when
    /// unknown (never synced, or a write failed part-way).
    synced: Option<DiskState>,
    /// Kept in memory only: no transcript, no lock file (a request's own
    /// conversation on `/v1/chat/completions`, whose key no other turn
    /// uses; see [`SessionStore::open_in_memory`]).
    in_memory: bool,
    /// The shared store the transcript lives in instead of `path`.
    remote: Option<Arc<dyn SessionBackend>>,
    /// Where the last message this process has is in `remote` (a turn
    /// reads only what follows it); `None` when unknown.
    remote_last: Option<i64>,
    /// [`slots`](Self::slots) and the dialect state last stored or read.
    state: Arc<state::StateCell>,
}

impl Session {
    /// Append one message to memory and disk (flushed before returning).
    pub fn append(&mut self, mut message: Value) -> std::io::Result<()> {
        if message.get("ts").is_none() {
            message["ts"] = Value::from(now_ts());
        }
        if self.in_memory {
            self.messages.push(message);
            self.last_active = Instant::now();
            return Ok(());
        }
        if let Some(remote) = &self.remote {
            let line = serde_json::to_string(&message).expect("a JSON value serialises");
            // The position is known to follow ours only when ours was known.
            let at = remote.append(&self.key, &line);
            let at = at.inspect_err(|_| self.remote_last = None)?;
            // Held back by the store: where it went is read at the next resync.
            if let Some(at) = at {
                self.remote_last = self.remote_last.map(|_| at);
            }
            self.messages.push(message);
            self.last_active = Instant::now();
            return Ok(());
        }
        // Opened for this one write: a descriptor held per loaded session
        // would let a server with many idle named sessions run out of
        // them (the usual limit is 1,024), and an append-mode open is
        // cheap beside the flush every message gets.
        let open = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
        };
        let mut file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = self.path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                open()?
            }
            opened => opened?,
        };
        let mut line = serde_json::to_string(&message).expect("a JSON value serialises");
        line.push('\n');
        let written = file.write_all(line.as_bytes()).and_then(|()| file.flush());
        if let Err(e) = written {
            // Part of the line may be on disk: the next resync reads it back
            // and sets the torn part aside.
            self.synced = None;
            return Err(e);
        }
        self.synced = file.metadata().ok().map(|m| DiskState::of(&m));
        self.messages.push(message);
        self.last_active = Instant::now();
        Ok(())
    }

    /// Messages as the model sees them (no bookkeeping fields).
    pub fn model_messages(&self) -> Vec<Value> {
        self.messages
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if let Some(o) = m.as_object_mut() {
                    o.remove("ts");
                }
                m
            })
            .collect()
    }

    /// The transcript file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file beside the transcript.
    pub fn lock_path(&self) -> PathBuf {
        sibling(&self.path, ".lock")
    }

    /// Bring memory up to date with the transcript on disk (another process
    /// may have written since) and repair it: unreadable lines are set
    /// aside, unanswered tool calls answered with [`interrupted_result`].
    /// Call it holding [`lock_turn`](Self::lock_turn): a repair must not race
    /// a live turn's writes.
    pub fn resync(&mut self) -> Result<Repairs, SessionError> {
        if self.in_memory {
            // Nothing on disk to read back; what the history lacks is
            // answered in memory.
            return Ok(self
                .repair(Vec::new(), false, &interrupted_result)
                .unwrap_or_default());
        }
        if self.remote.is_some() {
            return self.resync_remote();
        }
        let (key, path) = (self.key.clone(), self.path.clone());
        let io = move |doing, source| SessionError::Io {
            key: key.clone(),
            path: path.clone(),
            doing,
            source,
        };
        let state = DiskState::at(&self.path).map_err(|e| io("read the transcript", e))?;
        let mut unreadable = Vec::new();
        let mut unterminated = false;
        if self.synced != Some(state) {
            // Only what was appended since, when the file is the one this
            // process last saw, grown; else all of it.
            let tail = self.synced.and_then(|seen| seen.grown_to(state));
            let bytes = read_transcript(&self.path, tail.unwrap_or(0))
                .map_err(|e| io("read the transcript", e))?
                .unwrap_or_default();
            let parsed = parse_transcript(&bytes);
            if tail.is_some() {
                self.messages.extend(parsed.messages);
            } else {
                self.messages = parsed.messages;
                self.intact = 0;
                // Appends go to whatever file is at the path now.
            }
            self.started |= !self.messages.is_empty();
            unreadable = parsed.unreadable;
            unterminated = parsed.unterminated;
            self.synced = Some(state);
        }
        let stored = state::read_file(&state::file_of(&self.path))
            .map_err(|e| io("read the dialect state", e))?;
        self.state.read(&self.key, stored);
        self.repair(unreadable, unterminated, &interrupted_result)
            .map_err(|e| io("repair the transcript", e))
    }

    /// Answer this session's open tool calls with `text(tool)`: what a
    /// cancelled turn leaves behind, made valid for the next request.
    pub fn close_open_calls(&mut self, text: &dyn Fn(&str) -> String) -> std::io::Result<usize> {
        Ok(self.repair(Vec::new(), false, text)?.answered)
    }

    /// Apply [`repair_messages`] and, if anything changed, write the side
    /// file first and then the repaired transcript over the old one, so a
    /// crash in between duplicates at worst and never loses.
    fn repair(
        &mut self,
        unreadable: Vec<Vec<u8>>,
        unterminated: bool,
        text: &dyn Fn(&str) -> String,
    ) -> std::io::Result<Repairs> {
        // Only what follows the intact part, from a message that is not a
        // tool result: a repair keeps an intact prefix as it is and moves
        // nothing into it, so repairing the rest gives the same transcript
        // without going over every message of a long session each turn.
        let mut from = self.intact.min(self.messages.len());
        while from > 0 && from < self.messages.len() && self.messages[from]["role"] == "tool" {
            from -= 1;
        }
        let rest = self.messages.split_off(from);
        let repaired = repair_messages(rest, text);
        self.messages.extend(repaired.messages);
        self.intact = self.messages.len();
        let mut repairs = Repairs {
            answered: repaired.answered,
            set_aside: unreadable.len() + repaired.aside.len(),
            side_file: None,
        };
        if !repaired.changed && unreadable.is_empty() && !unterminated {
            return Ok(repairs);
        }
        if self.in_memory {
            return Ok(repairs);
        }
        if let Some(remote) = &self.remote {
            let mut side: Vec<String> = unreadable
                .iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect();
            side.extend(repaired.aside.iter().map(Value::to_string));
            let last = remote.replace(&self.key, &self.messages, &side);
            self.remote_last = last.as_ref().ok().copied();
            last?;
            return Ok(repairs);
        }
        let written = self.write_repairs(unreadable, &repaired.aside, &mut repairs);
        if written.is_err() {
            // Memory is repaired, the disk is not: read it again next time.
            self.synced = None;
        }
        written.map(|()| repairs)
    }

    /// The side file (if anything is set aside), then the transcript.
    fn write_repairs(
        &mut self,
        unreadable: Vec<Vec<u8>>,
        aside: &[Value],
        repairs: &mut Repairs,
    ) -> std::io::Result<()> {
        if repairs.set_aside > 0 {
            let mut lines = unreadable;
            lines.extend(aside.iter().map(|m| {
                serde_json::to_string(m)
                    .expect("a JSON value serialises")
                    .into_bytes()
            }));
            let side = self.set_aside(&lines)?;
            tracing::warn!(
                "session '{}': set aside {} unreadable line(s) or misplaced tool result(s) of {} into {}",
                self.key,
                repairs.set_aside,
                self.path.display(),
                side.display()
            );
            repairs.side_file = Some(side);
        }
        if repairs.answered > 0 {
            tracing::warn!(
                "session '{}': answered {} tool call(s) left without a result",
                self.key,
                repairs.answered
            );
        }
        let tmp = self.write_beside()?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        self.synced = Some(DiskState::at(&self.path)?);
        Ok(())
    }

    /// Write `lines` to a new side file `<transcript>.aside-<millis>[-N]`,
    /// never replacing one that exists.
    fn set_aside(&self, lines: &[Vec<u8>]) -> std::io::Result<PathBuf> {
        let stamp = now_millis();
        let mut n = 0u32;
        loop {
            let suffix = if n == 0 {
                format!(".aside-{stamp}")
            } else {
                format!(".aside-{stamp}-{n}")
            };
            let path = sibling(&self.path, &suffix);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    for line in lines {
                        file.write_all(line)?;
                        file.write_all(b"\n")?;
                    }
                    file.sync_all()?;
                    return Ok(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Start over: the old transcript is kept beside as `<key>.<time>.jsonl`.
    pub fn reset(&mut self) -> std::io::Result<()> {
        if let Some(remote) = &self.remote {
            remote.archive(&self.key)?;
        } else if !self.in_memory && self.path.exists() {
            let archived = self.path.with_extension(format!("{}.jsonl", now_millis()));
            std::fs::rename(&self.path, archived)?;
        }
        if !self.in_memory && self.remote.is_none() {
            match std::fs::remove_file(state::file_of(&self.path)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        self.synced = Some(DiskState::Missing);
        self.remote_last = None;
        self.messages.clear();
        self.intact = 0;
        self.started = false;
        self.slots = Arc::default();
        self.state.reset(self.slots.clone());
        Ok(())
    }

    /// Keep only the last `keep` messages (never starting on a tool result),
    /// rewriting the transcript atomically. Returns how many were dropped.
    pub fn compact(&mut self, keep: usize) -> std::io::Result<usize> {
        self.compact_with(keep, None)
    }

    /// Where [`compact`](Self::compact) would cut: the index of the first
    /// message kept; `None` when nothing would be dropped.
    pub fn compaction_cut(&self, keep: usize) -> Option<usize> {
        let cut = self.messages.len().saturating_sub(keep);
        // Start on a user message at or before the cut, so no tool result
        // loses the assistant message that asked for it.
        let start = (0..=cut.min(self.messages.len().saturating_sub(1)))
            .rev()
            .find(|&i| self.messages[i]["role"] == "user")?;
        (start != 0).then_some(start)
    }

    /// [`compact`](Self::compact), with `summary` (a message) put in place
    /// of the dropped ones when given.
    pub fn compact_with(&mut self, keep: usize, summary: Option<Value>) -> std::io::Result<usize> {
        let Some(start) = self.compaction_cut(keep) else {
            return Ok(0);
        };
        let mut kept: Vec<Value> = self.messages.split_off(start);
        let dropped = self.messages.len();
        if let Some(mut summary) = summary {
            if summary.get("ts").is_none() {
                summary["ts"] = Value::from(now_ts());
            }
            kept.insert(0, summary);
        }
        self.messages = kept;
        self.intact = 0;
        if self.in_memory {
            return Ok(dropped);
        }
        if let Some(remote) = &self.remote {
            let last = remote.replace(&self.key, &self.messages, &[]);
            self.remote_last = last.as_ref().ok().copied();
            last?;
            return Ok(dropped);
        }
        let tmp = self.write_beside()?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        self.synced = DiskState::at(&self.path).ok();
        Ok(dropped)
    }
    /// The messages written to a new temporary file in the transcript's
    /// directory, ready to be renamed over it. Its name is unique: a fixed
    /// one (`<key>.jsonl.tmp`) is shared by every process with a session of
    /// that key, and two compacting at once would truncate and rename each
    /// other's half-written file. Dropped unrenamed, it is deleted.
    fn write_beside(&self) -> std::io::Result<tempfile::NamedTempFile> {
        use std::os::unix::fs::PermissionsExt;

        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            // What `append` would create (0o666 less the umask), not the
            // temporary file's private 0o600 ...
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)?;
        // ... unless the transcript exists: then its mode carries over.
        if let Ok(meta) = std::fs::metadata(&self.path) {
            tmp.as_file().set_permissions(meta.permissions())?;
        }
        {
            let mut out = std::io::BufWriter::new(tmp.as_file_mut());
            for m in &self.messages {
                writeln!(out, "{}", serde_json::to_string(m).expect("serialises"))?;
            }
            out.flush()?;
        }
        tmp.as_file().sync_all()?;
        Ok(tmp)
    }

    /// Replace the whole transcript with `messages` (a context engine's
    /// compaction: the engine returns the new list), rewritten atomically
    /// as [`compact_with`](Self::compact_with) rewrites it. Messages
    /// without a `ts` get the current one; what is not an object is left out.
    pub fn replace_messages(&mut self, messages: Vec<Value>) -> std::io::Result<()> {
        let now = Value::from(now_ts());
        self.messages = messages
            .into_iter()
            .filter(Value::is_object)
            .map(|mut m| {
                if m.get("ts").is_none() {
                    m["ts"] = now.clone();
                }
                m
            })
            .collect();
        self.intact = 0;
        if self.in_memory {
            return Ok(());
        }
        if let Some(remote) = &self.remote {
            let last = remote.replace(&self.key, &self.messages, &[]);
            self.remote_last = last.as_ref().ok().copied();
            last?;
            return Ok(());
        }
        let tmp = self.write_beside()?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        self.synced = DiskState::at(&self.path).ok();
        Ok(())
    }
}

/// `<transcript file name><suffix>` in the transcript's directory.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

pub mod backend;
mod lock;
pub mod pg;
mod remote;
mod state;
mod store;
#[cfg(test)]
mod tests;
mod transcript;

pub use backend::SessionBackend;
pub use lock::TurnLock;

pub use store::{check_name, file_stem, SessionStore, MAX_STEM};
use transcript::{load_transcript, parse_transcript, read_transcript, repair_messages};
