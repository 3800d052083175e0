//! Sessions: one transcript per session key, persisted as JSON Lines under
//! `<home>/sessions/`, appended and flushed per message so a crash loses at
//! most the message in flight, and resumed from disk after a restart.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

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
}

impl Session {
    /// Append one message to memory and disk (flushed before returning).
    pub fn append(&mut self, mut message: Value) -> std::io::Result<()> {
        if message.get("ts").is_none() {
            let ts = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or_default();
            message["ts"] = Value::from((ts * 1000.0).round() / 1000.0);
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
        file.write_all(line.as_bytes())?;
        file.flush()?;
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

    /// Start over: the old transcript is kept beside as `<key>.<time>.jsonl`.
    pub fn reset(&mut self) -> std::io::Result<()> {
        self.file = None;
        if self.path.exists() {
            let stamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default();
            let archived = self.path.with_extension(format!("{stamp}.jsonl"));
            std::fs::rename(&self.path, archived)?;
        }
        self.messages.clear();
        self.started = false;
        Ok(())
    }

    /// Keep only the last `keep` messages (never starting on a tool result),
    /// rewriting the transcript atomically. Returns how many were dropped.
    pub fn compact(&mut self, keep: usize) -> std::io::Result<usize> {
        let cut = self.messages.len().saturating_sub(keep);
        // Start on a user message at or before the cut, so no tool result
        // loses the assistant message that asked for it.
        let Some(start) = (0..=cut.min(self.messages.len().saturating_sub(1)))
            .rev()
            .find(|&i| self.messages[i]["role"] == "user")
        else {
            return Ok(0);
        };
        if start == 0 {
            return Ok(0);
        }
        let kept: Vec<Value> = self.messages.split_off(start);
        let dropped = self.messages.len();
        self.messages = kept;
        let tmp = self.write_beside()?;
        self.file = None;
        tmp.persist(&self.path).map_err(|e| e.error)?;
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
        };
        let session = Arc::new(tokio::sync::Mutex::new(session));
        open.insert(key.to_string(), session.clone());
        session
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

/// Read a transcript, skipping a torn last line from a crash.
fn load_transcript(path: &Path) -> Vec<Value> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(v) => out.push(v),
            Err(e) => tracing::warn!(
                "{}: skipping unreadable line {} ({e})",
                path.display(),
                n + 1
            ),
        }
    }
    out
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
}
