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

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

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

/// The cross-process hold on a session for one turn; released on drop
/// (closing the descriptor releases the `flock`). The lock file stays: removing
/// it would let a waiter lock a file that a newcomer no longer sees.
#[must_use = "the session is locked only while this lives"]
pub struct TurnLock {
    file: Option<File>,
}

impl Drop for TurnLock {
    fn drop(&mut self) {
        // No holder to name once released (the lock goes with the descriptor).
        if let Some(file) = &self.file {
            let _ = file.set_len(0);
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
    /// OpenAI-format messages, without hook patches.
    pub messages: Vec<Value>,
    /// `on_session_start` has fired (or the session was resumed from disk).
    pub started: bool,
    /// `on_session_finalize` has fired.
    pub finalized: bool,
    pub last_active: Instant,
    path: PathBuf,
    file: Option<File>,
    /// The transcript as of this process's last read or write; `None` when
    /// unknown (never synced, or a write failed part-way).
    synced: Option<DiskState>,
}

impl Session {
    /// Append one message to memory and disk (flushed before returning).
    pub fn append(&mut self, mut message: Value) -> std::io::Result<()> {
        if message.get("ts").is_none() {
            message["ts"] = Value::from(now_ts());
        }
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            self.file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let file = self.file.as_mut().expect("opened above");
        let mut line = serde_json::to_string(&message).expect("a JSON value serialises");
        line.push('\n');
        let written = file.write_all(line.as_bytes()).and_then(|()| file.flush());
        if let Err(e) = written {
            // Part of the line may be on disk: the next resync reads it back
            // and sets the torn part aside.
            self.synced = None;
            self.file = None;
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

    /// Hold this session against other processes (and other agents of this
    /// one) for a turn, waiting at most `wait` for a turn in progress there
    /// to end. Within one agent, the session's mutex already serialises.
    pub async fn lock_turn(&self, wait: Duration) -> Result<TurnLock, SessionError> {
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
                    return Ok(TurnLock { file: None });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", e)),
            }
        }
        // Who holds it, for a waiter's message. Best effort: the lock is what counts.
        let _ = file
            .set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        Ok(TurnLock { file: Some(file) })
    }

    /// Bring memory up to date with the transcript on disk (another process
    /// may have written since) and repair it: unreadable lines are set
    /// aside, unanswered tool calls answered with [`interrupted_result`].
    /// Call it holding [`lock_turn`](Self::lock_turn): a repair must not race
    /// a live turn's writes.
    pub fn resync(&mut self) -> Result<Repairs, SessionError> {
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
            let bytes = read_transcript(&self.path)
                .map_err(|e| io("read the transcript", e))?
                .unwrap_or_default();
            let parsed = parse_transcript(&bytes);
            self.messages = parsed.messages;
            self.started |= !self.messages.is_empty();
            unreadable = parsed.unreadable;
            unterminated = parsed.unterminated;
            // Appends go to whatever file is at the path now.
            self.file = None;
            self.synced = Some(state);
        }
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
        let repaired = repair_messages(std::mem::take(&mut self.messages), text);
        self.messages = repaired.messages;
        let mut repairs = Repairs {
            answered: repaired.answered,
            set_aside: unreadable.len() + repaired.aside.len(),
            side_file: None,
        };
        if !repaired.changed && unreadable.is_empty() && !unterminated {
            return Ok(repairs);
        }
        let written = self.write_repairs(unreadable, &repaired.aside, &mut repairs);
        if written.is_err() {
            // Memory is repaired, the disk is not: read it again next time.
            self.synced = None;
            self.file = None;
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
        self.file = None;
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
        self.file = None;
        if self.path.exists() {
            let archived = self.path.with_extension(format!("{}.jsonl", now_millis()));
            std::fs::rename(&self.path, archived)?;
        }
        self.synced = Some(DiskState::Missing);
        self.messages.clear();
        self.started = false;
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
        let tmp = self.write_beside()?;
        self.file = None;
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
}

/// The bytes of the transcript at `path`, or `None` when there is none.
/// Opened without blocking and refused unless a regular file: a FIFO or a
/// device planted at a session's path must not hang the agent.
fn read_transcript(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::OpenOptionsExt;

    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file: move it away and the session starts afresh",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// `<transcript file name><suffix>` in the transcript's directory.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The pid a lock holder wrote into the lock file, if it did yet.
fn holder_of(lock: &Path) -> Option<u32> {
    let mut text = String::new();
    File::open(lock).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Every session of a host, loaded on first use.
pub struct SessionStore {
    dir: PathBuf,
    open: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
}

impl SessionStore {
    pub fn new(dir: impl Into<PathBuf>) -> SessionStore {
        SessionStore {
            dir: dir.into(),
            open: std::sync::Mutex::new(HashMap::new()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The transcript file of `key`.
    pub fn path_of(&self, key: &str) -> PathBuf {
        let safe: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = if safe == key && !key.is_empty() && !key.starts_with('.') {
            safe
        } else {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut h);
            format!("{}-{:08x}", safe.trim_start_matches('.'), h.finish() as u32)
        };
        self.dir.join(format!("{name}.jsonl"))
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
        let messages = load_transcript(&path);
        let session = Session {
            key: key.to_string(),
            started: !messages.is_empty(),
            messages,
            finalized: false,
            last_active: Instant::now(),
            path,
            file: None,
            synced: None,
        };
        let session = Arc::new(tokio::sync::Mutex::new(session));
        open.insert(key.to_string(), session.clone());
        session
    }

    /// A key `<parent>/sub-N` that no session has used, N counting up from
    /// `from`. Its empty transcript is created here, exclusively, so no other
    /// process or agent sharing the sessions directory claims it too: every
    /// `delegate` call starts a fresh conversation. Returns the key and N.
    pub fn claim_subagent_key(&self, parent: &str, from: u64) -> std::io::Result<(String, u64)> {
        std::fs::create_dir_all(&self.dir)?;
        let mut n = from.max(1);
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

/// A transcript as read: the messages, the raw lines that are not a JSON
/// object (a torn last line, or damage), and whether the last message
/// lacks its newline (the next append would run into it).
struct Parsed {
    messages: Vec<Value>,
    unreadable: Vec<Vec<u8>>,
    unterminated: bool,
}

fn parse_transcript(bytes: &[u8]) -> Parsed {
    let mut parsed = Parsed {
        messages: Vec::new(),
        unreadable: Vec::new(),
        unterminated: false,
    };
    let complete = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let count = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.is_object() => {
                parsed.messages.push(v);
                if i + 1 == count && !complete {
                    parsed.unterminated = true;
                }
            }
            _ => parsed.unreadable.push(line.to_vec()),
        }
    }
    parsed
}

/// Read a transcript for display or a first look: unreadable lines skipped
/// (and left in place; a turn's resync sets them aside).
fn load_transcript(path: &Path) -> Vec<Value> {
    let bytes = match read_transcript(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Vec::new(),
        Err(e) => {
            // The turn's resync reports it; nothing to show until then.
            tracing::warn!("{}: cannot read the transcript: {e}", path.display());
            return Vec::new();
        }
    };
    let parsed = parse_transcript(&bytes);
    if !parsed.unreadable.is_empty() {
        tracing::warn!(
            "{}: skipping {} unreadable line(s); the next turn sets them aside",
            path.display(),
            parsed.unreadable.len()
        );
    }
    parsed.messages
}

/// The `(id, tool name)` of each call an assistant message asks for.
fn tool_calls_of(message: &Value) -> Vec<(String, String)> {
    if message["role"] != "assistant" {
        return Vec::new();
    }
    let Some(calls) = message["tool_calls"].as_array() else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(|c| {
            let id = c["id"].as_str()?.to_string();
            let name = c["function"]["name"].as_str().unwrap_or("tool").to_string();
            Some((id, name))
        })
        .collect()
}

struct Repaired {
    messages: Vec<Value>,
    /// Tool results that answer no call before them.
    aside: Vec<Value>,
    answered: usize,
    changed: bool,
}

/// Make a transcript one an OpenAI-compatible API accepts: every call of an
/// assistant message is followed by its result before the next other
/// message. A missing result is taken from a misplaced one further on (two
/// processes interleaving, before turn locks) or else written as
/// `text(tool)`; a tool result that answers nothing is set aside. Order is
/// otherwise kept, and an intact transcript comes back unchanged.
fn repair_messages(messages: Vec<Value>, text: &dyn Fn(&str) -> String) -> Repaired {
    let is_tool = |m: &Value| m["role"] == "tool";
    let id_of = |m: &Value| m["tool_call_id"].as_str().map(str::to_string);
    // Which tool results sit where they belong: in the run of results right
    // after the assistant message that asked for them.
    let mut placed = vec![false; messages.len()];
    let mut i = 0;
    while i < messages.len() {
        let asked: HashSet<String> = tool_calls_of(&messages[i])
            .into_iter()
            .map(|c| c.0)
            .collect();
        i += 1;
        let mut seen = HashSet::new();
        while i < messages.len() && is_tool(&messages[i]) {
            if let Some(id) = id_of(&messages[i]) {
                placed[i] = asked.contains(&id) && seen.insert(id);
            }
            i += 1;
        }
    }
    let mut slots: Vec<Option<Value>> = messages.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    let mut aside = Vec::new();
    let (mut answered, mut changed) = (0, false);
    let mut i = 0;
    while i < slots.len() {
        let Some(message) = slots[i].take() else {
            i += 1; // moved into place earlier
            continue;
        };
        i += 1;
        if is_tool(&message) {
            // Not in the run after its call (placed ones are taken below).
            aside.push(message);
            changed = true;
            continue;
        }
        let calls = tool_calls_of(&message);
        out.push(message);
        if calls.is_empty() {
            continue;
        }
        let mut got = HashSet::new();
        while i < slots.len() && slots[i].as_ref().is_none_or(is_tool) {
            if placed[i] {
                let result = slots[i].take().expect("placed results are present");
                got.extend(id_of(&result));
                out.push(result);
            } else if let Some(stray) = slots[i].take() {
                aside.push(stray);
                changed = true;
            }
            i += 1;
        }
        for (id, name) in calls {
            if got.contains(&id) {
                continue;
            }
            changed = true;
            let later = (i..slots.len()).find(|&j| {
                !placed[j]
                    && slots[j]
                        .as_ref()
                        .is_some_and(|m| is_tool(m) && id_of(m).as_deref() == Some(id.as_str()))
            });
            match later {
                Some(j) => out.push(slots[j].take().expect("found above")),
                None => {
                    answered += 1;
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": id,
                        "name": name,
                        "content": text(&name),
                        "ts": now_ts(),
                    }));
                }
            }
            got.insert(id);
        }
    }
    Repaired {
        messages: out,
        aside,
        answered,
        changed,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn converse(session: &mut Session, turns: usize) {
        for i in 0..turns {
            session
                .append(json!({"role": "user", "content": format!("question {i}")}))
                .unwrap();
            session
                .append(json!({"role": "assistant", "content": format!("answer {i}")}))
                .unwrap();
        }
    }

    #[test]
    fn compaction_leaves_another_process_temporary_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let path = store.path_of("chat");
        let session = store.get("chat");
        let mut session = session.try_lock().unwrap();
        converse(&mut session, 3);
        // Where a compaction with a fixed temporary name would write: another
        // process compacting the same session may be writing it right now.
        let theirs = path.with_extension("jsonl.tmp");
        std::fs::write(&theirs, "another process, mid-write\n").unwrap();

        assert_eq!(session.compact(2).unwrap(), 4);

        assert_eq!(
            std::fs::read_to_string(&theirs).unwrap(),
            "another process, mid-write\n"
        );
        assert_eq!(
            entries(dir.path()),
            ["chat.jsonl", "chat.jsonl.tmp"],
            "no temporary file of ours is left behind"
        );
        let on_disk = load_transcript(&path);
        assert_eq!(on_disk, session.messages);
        assert_eq!(on_disk[0]["content"], "question 2");
    }

    #[test]
    fn compaction_keeps_the_transcript_mode() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let path = store.path_of("private");
        let session = store.get("private");
        let mut session = session.try_lock().unwrap();
        converse(&mut session, 3);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        session.compact(2).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn two_hosts_compacting_one_session_at_once_both_succeed() {
        let dir = tempfile::tempdir().unwrap();
        // One store per host, as two processes sharing a home would have.
        let hosts = 2;
        let start = std::sync::Barrier::new(hosts);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..hosts)
                .map(|_| {
                    scope.spawn(|| {
                        let store = SessionStore::new(dir.path());
                        let session = store.get("shared");
                        let mut session = session.try_lock().unwrap();
                        start.wait();
                        for _ in 0..50 {
                            converse(&mut session, 2);
                            session.compact(2)?;
                        }
                        Ok::<(), std::io::Error>(())
                    })
                })
                .collect();
            for handle in handles {
                handle.join().unwrap().expect("every compaction succeeds");
            }
        });
        assert_eq!(entries(dir.path()), ["shared.jsonl"]);
        let text = std::fs::read_to_string(dir.path().join("shared.jsonl")).unwrap();
        for line in text.lines() {
            serde_json::from_str::<Value>(line).expect("only whole lines");
        }
    }

    /// A well-formed conversation of `turns` (tool calls answered in order).
    fn conversation(turns: &[(u8, bool)]) -> Vec<Value> {
        let mut out = Vec::new();
        for (t, &(calls, text)) in turns.iter().enumerate() {
            out.push(json!({"role": "user", "content": format!("q{t}")}));
            if calls > 0 {
                let ids: Vec<String> = (0..calls).map(|c| format!("call_{t}_{c}")).collect();
                out.push(json!({"role": "assistant", "content": "", "tool_calls": ids.iter().map(|id| json!({"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}})).collect::<Vec<_>>()}));
                for id in &ids {
                    out.push(json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": format!("ran {{{id}}}\n")}));
                }
            }
            if text {
                out.push(json!({"role": "assistant", "content": format!("a{t} ✓")}));
            }
        }
        out
    }

    fn answered_in_place(messages: &[Value]) -> bool {
        let mut open: Vec<&str> = Vec::new();
        for m in messages {
            if m["role"] == "tool" {
                let id = m["tool_call_id"].as_str().unwrap();
                let Some(at) = open.iter().position(|o| *o == id) else {
                    return false;
                };
                open.remove(at);
            } else {
                if !open.is_empty() {
                    return false;
                }
                open = m["tool_calls"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|c| c["id"].as_str()).collect())
                    .unwrap_or_default();
            }
        }
        open.is_empty()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A crash can cut the transcript at any byte. Whatever is left, a
        /// resync keeps every whole message, sets the torn rest aside byte
        /// for byte, and leaves a transcript whose calls are all answered.
        #[test]
        fn a_transcript_cut_anywhere_resyncs_to_a_valid_one_losing_nothing(
            turns in proptest::collection::vec((0u8..3, proptest::bool::ANY), 1..5),
            cut_at in 0.0f64..1.0,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = SessionStore::new(dir.path());
            let path = store.path_of("cut");
            let full: String = conversation(&turns).iter().map(|m| format!("{m}\n")).collect();
            let mut cut = ((full.len() as f64) * cut_at) as usize;
            while !full.is_char_boundary(cut) {
                cut -= 1;
            }
            let kept = &full[..cut];
            std::fs::write(&path, kept).unwrap();
            let whole: Vec<Value> = kept.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
            let torn = kept.rsplit_once('\n').map_or(kept, |(_, t)| t);
            let torn_is_whole = serde_json::from_str::<Value>(torn).is_ok_and(|v| v.is_object());

            let session = store.get("cut");
            let mut session = session.try_lock().unwrap();
            let repairs = session.resync().unwrap();

            proptest::prop_assert!(answered_in_place(&session.messages));
            let on_disk = load_transcript(&path);
            proptest::prop_assert_eq!(&on_disk, &session.messages);
            // Every whole message kept, in order; only answers added.
            let originals: Vec<&Value> = on_disk.iter().filter(|m| m.get("ts").is_none()).collect();
            proptest::prop_assert_eq!(originals, whole.iter().collect::<Vec<_>>());
            let text = std::fs::read_to_string(&path).unwrap();
            proptest::prop_assert!(text.is_empty() || text.ends_with('\n'));
            if torn.is_empty() || torn_is_whole {
                proptest::prop_assert_eq!(repairs.side_file, None);
            } else {
                let side = repairs.side_file.expect("the torn line is set aside");
                proptest::prop_assert_eq!(std::fs::read_to_string(side).unwrap(), format!("{torn}\n"));
            }
            // A second resync finds nothing to do.
            drop(session);
            let again = SessionStore::new(dir.path());
            let again = again.get("cut");
            let mut again = again.try_lock().unwrap();
            proptest::prop_assert_eq!(again.resync().unwrap(), Repairs::default());
        }

        /// An intact transcript is never rewritten.
        #[test]
        fn an_intact_transcript_is_left_alone(
            turns in proptest::collection::vec((0u8..3, proptest::bool::ANY), 0..5),
        ) {
            let messages = conversation(&turns);
            let repaired = repair_messages(messages.clone(), &interrupted_result);
            proptest::prop_assert!(!repaired.changed);
            proptest::prop_assert_eq!(repaired.messages, messages);
        }
    }

    #[test]
    fn repeated_call_ids_across_turns_are_not_confused() {
        // The scripted provider and some servers reuse ids from turn to turn.
        let call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "exec", "arguments": "{}"}}]});
        let result =
            json!({"role": "tool", "tool_call_id": "call_0", "name": "exec", "content": "ok"});
        let messages = vec![
            json!({"role": "user", "content": "1"}),
            call.clone(),
            json!({"role": "user", "content": "2"}),
            call.clone(),
            result.clone(),
        ];
        let repaired = repair_messages(messages, &interrupted_result);
        assert_eq!(repaired.answered, 1);
        assert_eq!(repaired.messages[2]["content"], interrupted_result("exec"));
        assert_eq!(
            repaired.messages[5], result,
            "the second call keeps its own result"
        );
        assert!(answered_in_place(&repaired.messages));
    }

    #[tokio::test]
    async fn a_held_session_refuses_another_holder_then_frees_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (SessionStore::new(dir.path()), SessionStore::new(dir.path()));
        let (a, b) = (one.get("k"), two.get("k"));
        let (a, b) = (a.lock().await, b.lock().await);
        let held = a.lock_turn(Duration::from_millis(10)).await.unwrap();
        let started = Instant::now();
        let err = b.lock_turn(Duration::from_millis(200)).await.err().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(
            matches!(err, SessionError::Busy { holder: Some(pid), .. } if pid == std::process::id())
        );
        drop(held);
        let _second = b.lock_turn(Duration::from_millis(10)).await.unwrap();
    }

    #[tokio::test]
    async fn a_fifo_at_the_transcript_path_is_refused_promptly() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let path = store.path_of("fifo");
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let session = store.get("fifo");
        let mut session = session.lock().await;
        let _held = session.lock_turn(Duration::from_secs(1)).await.unwrap();
        let err = tokio::time::timeout(Duration::from_secs(5), async { session.resync() })
            .await
            .expect("no hang")
            .unwrap_err();
        assert!(matches!(err, SessionError::Io { .. }));
        assert!(
            err.to_string().starts_with(&format!(
                "cannot read the transcript for session 'fifo' ({}): not a regular file",
                path.display()
            )),
            "{err}"
        );
    }
}
