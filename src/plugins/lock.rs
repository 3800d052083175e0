//! The lock file, `<home>/plugins.lock.json`: what each installed user
//! plugin was when it was installed, so that a later change to its files is
//! noticed before it runs, and so that another home can install the same set
//! (`plugins install --from-lock`).
//!
//! One entry per plugin installed by `plugins install`, keyed by its name
//! (its directory under `<home>/plugins/`): the source it came from, the
//! git commit it was checked out at (none for a local directory), a sha256
//! of its files and one per file (so a change can be named file by file),
//! its dialect, and the hooks, tools and web providers its manifest
//! declares. An editable install (`--editable DIR`, a link to a directory
//! being worked on) is recorded as such and never checked.
//!
//! The file is written atomically (temp file + rename) under an exclusive
//! lock. One that is not valid JSON or not of this shape is reported with
//! its path and never overwritten: the entries it holds are the only record
//! of what was accepted. While it is unreadable, enabled user plugins are
//! not loaded (fail closed: nothing can be checked), and installs and
//! accepts are refused until it is fixed or deleted.
//!
//! Plugins with no entry (bundled ones, ones placed by hand, ones installed
//! before the lock existed) load as before.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The lock file's name in the home.
pub const LOCK_FILE: &str = "plugins.lock.json";

/// The shape of the file this build writes (`"version"`).
pub const LOCK_VERSION: u32 = 1;

/// `<home>/plugins.lock.json`.
pub fn lock_path(home: &Path) -> PathBuf {
    home.join(LOCK_FILE)
}

/// The lock file of the user plugins in `user_root` (`<home>/plugins`):
/// beside it, in the home.
pub fn lock_path_for_user_root(user_root: &Path) -> PathBuf {
    user_root.with_file_name(LOCK_FILE)
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    pub version: u32,
    /// By plugin name, sorted (stable diffs).
    pub plugins: BTreeMap<String, LockEntry>,
}

/// What one plugin was when it was installed or last accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// What `plugins install` accepts as SOURCE to get it again: the git
    /// URL (a local repository's path, with `--ref`) or the directory, with
    /// `#sub/path` when the plugin is a sub-directory.
    pub source: String,
    /// The commit checked out (git sources); `None` for a local directory.
    pub commit: Option<String>,
    /// `sha256:<hex>` over its files (see [`content_hash`]); `None` when
    /// editable.
    pub hash: Option<String>,
    /// Each file's `sha256:<hex>`, by relative path: what tells which files
    /// changed.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The plugin API it loads through.
    pub dialect: String,
    /// Its manifest's version ("" when it has none).
    #[serde(default)]
    pub version: String,
    /// What its manifest declares it registers.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// A development install: a link to the directory, never checked.
    #[serde(default)]
    pub editable: bool,
    /// Where its dependencies are installed: `shared` (the home's shared
    /// environment) or `own` (its own, `<home>/envs/plugins/<name>`);
    /// absent when it declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The requirements it declares (see `plugins::deps`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
    /// The packages of its environment as uv installed them, `name →
    /// version` (`uv pip freeze`): what `--from-lock` installs again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dependencies: BTreeMap<String, String>,
}

/// The hooks, tools and web providers a manifest declares
/// (`provides_hooks`, `provides_tools`, `provides_web_providers`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    #[serde(default)]
    pub hooks: Vec<String>,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub web_providers: Vec<String>,
}

/// Why the lock file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path} is not a usable plugin lock file ({message}); it was left as it is — fix it or move it away (installs and the check of installed plugins need it)")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> LockError + '_ {
    move |e| LockError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Read the lock file at `path`; a missing one is empty.
pub fn read_file(path: &Path) -> Result<LockFile, LockError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LockFile {
                version: LOCK_VERSION,
                plugins: BTreeMap::new(),
            })
        }
        Err(e) => return Err(io_error(path)(e)),
    };
    let corrupt = |message: String| LockError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let lock: LockFile = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    if lock.version != LOCK_VERSION {
        return Err(corrupt(format!(
            "version {} is not one this build reads ({LOCK_VERSION})",
            lock.version
        )));
    }
    Ok(lock)
}

/// Read `<home>/plugins.lock.json`.
pub fn read(home: &Path) -> Result<LockFile, LockError> {
    read_file(&lock_path(home))
}

/// Edit `<home>/plugins.lock.json` under an exclusive lock and write it
/// back atomically. A corrupt file is refused, never replaced.
pub fn update(home: &Path, change: impl FnOnce(&mut LockFile)) -> Result<(), LockError> {
    let path = lock_path(home);
    let io = io_error(&path);
    let _held = crate::plugins::atomic::lock(home, ".plugins.lock.lock").map_err(&io)?;
    let mut lock = read_file(&path)?;
    change(&mut lock);
    let mut text = serde_json::to_string_pretty(&lock).expect("a lock file serialises");
    text.push('\n');
    crate::plugins::atomic::replace(&path, &text).map_err(&io)
}

/// A plugin directory's content: the sha256 of the whole and of each file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    pub hash: String,
    pub files: BTreeMap<String, String>,
}

/// Hash the files of `dir`: for each regular file, in the order of its
/// relative path (`/`-separated), the path, a NUL, its length (8 bytes,
/// little-endian) and its bytes go into one sha256. `__pycache__`, `.git`
/// and `*.pyc` are left out: Python writes them as it imports. Links are
/// followed (an editable or hand-made plugin may hold them; an installed
/// copy holds none).
pub fn content_hash(dir: &Path) -> std::io::Result<Content> {
    let mut paths = Vec::new();
    collect(dir, "", &mut paths, 0)?;
    paths.sort();
    let mut whole = Sha256::new();
    let mut files = BTreeMap::new();
    let mut buf = vec![0u8; 64 * 1024];
    for rel in paths {
        let mut file = File::open(dir.join(&rel))?;
        let mut bytes = Vec::new();
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        whole.update(rel.as_bytes());
        whole.update([0u8]);
        whole.update((bytes.len() as u64).to_le_bytes());
        whole.update(&bytes);
        files.insert(rel, hex(&Sha256::digest(&bytes)));
    }
    Ok(Content {
        hash: hex(&whole.finalize()),
        files,
    })
}

/// Deeper than this is a link loop, not a plugin.
const MAX_DEPTH: usize = 64;

fn collect(dir: &Path, prefix: &str, out: &mut Vec<String>, depth: usize) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other(format!(
            "{} is nested too deeply (a link loop?)",
            dir.display()
        )));
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "__pycache__" || name == ".git" || name.ends_with(".pyc") {
            continue;
        }
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::metadata(entry.path())?;
        if meta.is_dir() {
            collect(&entry.path(), &rel, out, depth + 1)?;
        } else if meta.is_file() {
            out.push(rel);
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(7 + bytes.len() * 2);
    s.push_str("sha256:");
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Which files differ between a lock entry and a directory's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drift {
    pub modified: Vec<String>,
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl Drift {
    /// The files of `recorded` that `now` changed, added or lost.
    pub fn between(recorded: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Drift {
        let mut drift = Drift::default();
        for (path, hash) in now {
            match recorded.get(path) {
                None => drift.added.push(path.clone()),
                Some(h) if h != hash => drift.modified.push(path.clone()),
                Some(_) => {}
            }
        }
        drift.removed = recorded
            .keys()
            .filter(|p| !now.contains_key(*p))
            .cloned()
            .collect();
        drift
    }

    pub fn is_empty(&self) -> bool {
        self.modified.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }

    /// `modified: a.py, b.py; added: c.py`.
    pub fn summary(&self) -> String {
        [
            ("modified", &self.modified),
            ("added", &self.added),
            ("removed", &self.removed),
        ]
        .iter()
        .filter(|(_, files)| !files.is_empty())
        .map(|(what, files)| format!("{what}: {}", files.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// How a user plugin's files compare with its lock entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// No entry: not checked (loads as before).
    Unlocked,
    /// An editable install: not checked.
    Editable,
    /// The files are the ones recorded.
    Unchanged,
    /// They changed since (`drift` names which, when the entry lists its
    /// files).
    Changed { drift: Drift, now: String },
    /// They could not be read.
    Unreadable(String),
}

/// Compare `dir` with `entry` (`None`: no entry).
pub fn check(entry: Option<&LockEntry>, dir: &Path) -> Check {
    let Some(entry) = entry else {
        return Check::Unlocked;
    };
    if entry.editable {
        return Check::Editable;
    }
    let content = match content_hash(dir) {
        Ok(c) => c,
        Err(e) => return Check::Unreadable(e.to_string()),
    };
    if entry.hash.as_deref() == Some(content.hash.as_str()) {
        return Check::Unchanged;
    }
    Check::Changed {
        drift: Drift::between(&entry.files, &content.files),
        now: content.hash,
    }
}

/// The text of a plugin refused because its files changed.
pub fn changed_message(name: &str, drift: &Drift) -> String {
    let what = if drift.is_empty() {
        String::new()
    } else {
        format!(" ({})", drift.summary())
    };
    format!(
        "its files changed since it was installed{what}; it is not loaded until the change is accepted: review it, then run: plughost plugins accept {name}"
    )
}

/// `plugins list --json` and the wheel's `Host.plugins()`: each record with `lock`, its user plugin's lock
/// entry (`null` when it has none, is not a user plugin, or the lock file
/// is unreadable — the plugin's `error` then says so).
pub fn with_entries(home: &Path, records: impl serde::Serialize) -> Value {
    let mut value = serde_json::to_value(records).expect("records serialise");
    let entries = read(home).map(|l| l.plugins).unwrap_or_default();
    if let Value::Array(items) = &mut value {
        for item in items.iter_mut() {
            let Value::Object(record) = item else {
                continue;
            };
            let entry = (record.get("source") == Some(&Value::from("user")))
                .then(|| record.get("key").and_then(Value::as_str))
                .flatten()
                .and_then(|key| entries.get(key))
                .map(|e| serde_json::to_value(e).expect("an entry serialises"))
                .unwrap_or(Value::Null);
            record.insert("lock".into(), entry);
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_paths_and_bytes_but_not_bytecode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        std::fs::create_dir(dir.path().join("__pycache__")).unwrap();
        std::fs::write(dir.path().join("__pycache__/a.cpython-311.pyc"), "junk").unwrap();
        let first = content_hash(dir.path()).unwrap();
        assert_eq!(first.files.len(), 1);
        std::fs::write(dir.path().join("stray.pyc"), "junk").unwrap();
        assert_eq!(content_hash(dir.path()).unwrap(), first);
        std::fs::write(dir.path().join("a.py"), "x = 2\n").unwrap();
        let second = content_hash(dir.path()).unwrap();
        assert_ne!(second.hash, first.hash);
        let drift = Drift::between(&first.files, &second.files);
        assert_eq!(drift.modified, vec!["a.py".to_string()]);
        assert_eq!(drift.summary(), "modified: a.py");
    }

    #[test]
    fn a_corrupt_lock_is_refused_and_kept() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(lock_path(home.path()), "{not json").unwrap();
        assert!(matches!(read(home.path()), Err(LockError::Corrupt { .. })));
        assert!(update(home.path(), |_| {}).is_err());
        assert_eq!(
            std::fs::read_to_string(lock_path(home.path())).unwrap(),
            "{not json"
        );
    }
}
