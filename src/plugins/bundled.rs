//! The plugins that ship inside the binary (`plugins_bundled/`).
//!
//! They are compiled in, so an installed binary finds them wherever it runs
//! from, and written out once per content version to a cache directory
//! (plugins are ordinary directories on disk: their skills and data files
//! are read by path). `PLUGHOST_BUNDLED_DIR` points elsewhere instead (the
//! wheel uses it for the copy it ships).
//!
//! They must never vanish quietly: they include `command-guard`. When the
//! cache cannot be written (read-only or full disk, a bad `XDG_CACHE_HOME`)
//! they are written to a private temporary directory that lives as long as
//! the hosts using it; when even that fails, [`locate`] says which plugins
//! are missing and why, and the host decides how loudly to refuse.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use include_dir::{include_dir, Dir, DirEntry};

use crate::plugins::install::staging;

static BUNDLED: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/plugins_bundled");

/// Scratch name of a cache extraction in progress (`<kind><pid>-<random>`).
const STAGING: &str = ".staging-";
/// Scratch name of a private fallback copy in the temporary directory.
const FALLBACK: &str = "plughost-bundled-";

/// Where the bundled plugins are for this process. Holding it keeps a
/// temporary fallback copy on disk; the copy is removed when the last
/// holder goes (the host keeps one for as long as it lives).
#[derive(Clone, Debug)]
pub struct Located {
    dir: PathBuf,
    _fallback: Option<Arc<tempfile::TempDir>>,
}

impl Located {
    /// A directory given by the caller (kept as it is, nothing extracted).
    pub fn at(dir: impl Into<PathBuf>) -> Located {
        Located {
            dir: dir.into(),
            _fallback: None,
        }
    }

    /// The directory to scan for bundled plugins.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this is the temporary fallback copy (the cache was unwritable).
    pub fn is_fallback(&self) -> bool {
        self._fallback.is_some()
    }
}

/// The bundled plugins could be written neither to the cache nor to a
/// temporary directory.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "the bundled plugins {} are missing: they could not be written to {} ({cache_error}) nor to a temporary directory ({fallback_error}); free some space, or set XDG_CACHE_HOME (or TMPDIR) to a writable directory, or PLUGHOST_BUNDLED_DIR to a copy of them",
    .names.join(", "),
    .cache.display()
)]
pub struct BundledUnavailable {
    /// The keys of the plugins that could not be provided.
    pub names: Vec<String>,
    /// Where the cache copy should have been.
    pub cache: PathBuf,
    pub cache_error: String,
    pub fallback_error: String,
}

impl BundledUnavailable {
    /// Why each of them is missing (without the list of names).
    pub fn reason(&self) -> String {
        format!(
            "not available: the bundled plugins could not be written to {} ({}) nor to a temporary directory ({})",
            self.cache.display(),
            self.cache_error,
            self.fallback_error
        )
    }
}

/// The directory to scan for bundled plugins: `PLUGHOST_BUNDLED_DIR`, else
/// the cache copy (written if missing), else a temporary copy.
///
/// A `PLUGHOST_BUNDLED_DIR` that is not a directory is taken for a mistake
/// and ignored, loudly: silently loading no bundled plugins would drop the
/// safety ones (command-guard) without a word.
pub fn locate(home: &Path) -> Result<Located, BundledUnavailable> {
    if let Some(dir) = std::env::var_os("PLUGHOST_BUNDLED_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if dir.is_dir() {
            return Ok(Located {
                dir,
                _fallback: None,
            });
        }
        tracing::warn!(
            "PLUGHOST_BUNDLED_DIR={} is not a directory; using the built-in bundled plugins instead",
            dir.display()
        );
    }
    let target = cache_root(home).join(format!(
        "bundled-{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        content_hash()
    ));
    locate_at(target, &std::env::temp_dir())
}

/// [`locate`] with the cache copy at `target` and the fallback under `temp`.
fn locate_at(target: PathBuf, temp: &Path) -> Result<Located, BundledUnavailable> {
    // A staging directory a killed extractor left is removed here, whether
    // or not this process extracts.
    if let Some(parent) = target.parent() {
        staging::sweep(parent, STAGING);
    }
    if target.join(".complete").is_file() {
        return Ok(Located {
            dir: target,
            _fallback: None,
        });
    }
    let cache_error = match extract(&target) {
        Ok(()) => {
            return Ok(Located {
                dir: target,
                _fallback: None,
            })
        }
        Err(e) => e.to_string(),
    };
    match fallback(temp) {
        Ok(copy) => {
            tracing::warn!(
                "could not write the bundled plugins to {} ({cache_error}); using a temporary copy in {} for as long as plughost runs",
                target.display(),
                copy.path().display()
            );
            Ok(Located {
                dir: copy.path().to_path_buf(),
                _fallback: Some(copy),
            })
        }
        Err(e) => Err(BundledUnavailable {
            names: names(),
            cache: target,
            cache_error,
            fallback_error: e.to_string(),
        }),
    }
}

/// The keys of the bundled plugins (their directory names).
pub fn names() -> Vec<String> {
    BUNDLED
        .dirs()
        .filter_map(|d| d.path().file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n != "__pycache__")
        .collect()
}

/// The process's temporary copy: shared by the hosts alive at the same
/// time, written again when none is.
fn fallback(temp: &Path) -> std::io::Result<Arc<tempfile::TempDir>> {
    static CURRENT: Mutex<Weak<tempfile::TempDir>> = Mutex::new(Weak::new());
    let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(copy) = current.upgrade().filter(|c| c.path().starts_with(temp)) {
        return Ok(copy);
    }
    staging::sweep(temp, FALLBACK);
    let copy = tempfile::Builder::new()
        .prefix(&staging::prefix(FALLBACK))
        .tempdir_in(temp)?;
    write_files(copy.path())?;
    let copy = Arc::new(copy);
    *current = Arc::downgrade(&copy);
    Ok(copy)
}

fn cache_root(home: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("plughost");
    }
    home.join(".cache")
}

fn files() -> Vec<&'static include_dir::File<'static>> {
    fn walk(dir: &'static Dir<'static>, out: &mut Vec<&'static include_dir::File<'static>>) {
        for entry in dir.entries() {
            match entry {
                DirEntry::Dir(d) => {
                    if d.path().file_name().is_some_and(|n| n == "__pycache__") {
                        continue;
                    }
                    walk(d, out)
                }
                DirEntry::File(f) => {
                    if f.path().extension().is_some_and(|e| e == "pyc") {
                        continue;
                    }
                    out.push(f)
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&BUNDLED, &mut out);
    out
}

fn content_hash() -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files() {
        f.path().hash(&mut h);
        f.contents().hash(&mut h);
    }
    h.finish()
}

/// Write the bundled plugins to `target` through a staging directory renamed
/// into place, so a reader never sees a partial copy. Several hosts may
/// start at once, as processes or as threads of one process: each stages in
/// a directory of its own (a pid alone is shared by threads, and one
/// extractor would clear another's files), and whoever renames second finds
/// the same content already there, keyed by its hash, which is success.
fn extract(target: &Path) -> std::io::Result<()> {
    let parent = target.parent().expect("target has a parent");
    std::fs::create_dir_all(parent)?;
    // Removed when dropped, on every way out: nothing is left behind.
    let scratch = tempfile::Builder::new()
        .prefix(&staging::prefix(STAGING))
        .tempdir_in(parent)?;
    write_files(scratch.path())?;
    std::fs::write(scratch.path().join(".complete"), b"")?;
    match std::fs::rename(scratch.path(), target) {
        Ok(()) => Ok(()),
        // Another extractor got there first: its copy is the same content.
        Err(_) if target.join(".complete").is_file() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Write every bundled file under `root`.
fn write_files(root: &Path) -> std::io::Result<()> {
    for f in files() {
        let path = root.join(f.path());
        std::fs::create_dir_all(path.parent().expect("file has a parent"))?;
        std::fs::write(&path, f.contents())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn concurrent_extractions_all_succeed_into_one_complete_copy() {
        let cache = tempfile::tempdir().unwrap();
        // A few rounds, each into a fresh directory: one race may happen to
        // serialise, several in a row do not.
        for round in 0..5 {
            let parent = cache.path().join(format!("round-{round}/plughost"));
            let target = parent.join("bundled-test");
            let extractors = 8;
            let start = std::sync::Barrier::new(extractors);
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..extractors)
                    .map(|_| {
                        scope.spawn(|| {
                            start.wait();
                            extract(&target)
                        })
                    })
                    .collect();
                for handle in handles {
                    handle.join().unwrap().expect("every extractor succeeds");
                }
            });
            assert!(target.join(".complete").is_file());
            let files = files();
            assert!(!files.is_empty());
            for f in files {
                assert_eq!(
                    std::fs::read(target.join(f.path())).unwrap(),
                    f.contents(),
                    "{}",
                    f.path().display()
                );
            }
            assert_eq!(
                entries(&parent),
                ["bundled-test"],
                "no staging directory is left behind"
            );
        }
    }

    #[test]
    fn extracting_over_a_complete_copy_succeeds_and_leaves_no_staging() {
        let cache = tempfile::tempdir().unwrap();
        let target = cache.path().join("bundled-test");
        extract(&target).unwrap();
        extract(&target).unwrap();
        assert!(target.join(".complete").is_file());
        assert_eq!(entries(cache.path()), ["bundled-test"]);
    }

    /// A path that cannot be a directory: it lies under a regular file
    /// (permission bits do not stop root; this does).
    fn under_a_file(dir: &Path) -> PathBuf {
        let file = dir.join("a-file");
        std::fs::write(&file, b"").unwrap();
        file.join("plughost")
    }

    #[test]
    fn an_unwritable_cache_falls_back_to_a_temporary_copy_removed_with_its_last_holder() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join("tmp");
        std::fs::create_dir(&temp).unwrap();
        let target = under_a_file(dir.path()).join("bundled-test");
        let located = locate_at(target.clone(), &temp).unwrap();
        assert!(located.is_fallback());
        assert!(located.dir().starts_with(&temp));
        for name in names() {
            assert!(
                located.dir().join(&name).join("__init__.py").is_file(),
                "{name}"
            );
        }
        let again = locate_at(target, &temp).unwrap();
        assert_eq!(again.dir(), located.dir(), "one copy while one is held");
        let copy = located.dir().to_path_buf();
        drop(located);
        assert!(copy.exists());
        drop(again);
        assert!(!copy.exists(), "removed with its last holder");
        assert_eq!(entries(&temp), Vec::<String>::new());
    }

    #[test]
    fn nowhere_to_write_names_every_missing_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let target = under_a_file(dir.path()).join("bundled-test");
        let temp = dir.path().join("a-file").join("tmp");
        let err = locate_at(target, &temp).unwrap_err();
        let message = err.to_string();
        for name in ["command-guard", "disk-cleanup", "tool-audit"] {
            assert!(err.names.iter().any(|n| n == name), "{:?}", err.names);
            assert!(message.contains(name), "{message}");
        }
        assert!(message.contains("XDG_CACHE_HOME"), "{message}");
    }

    #[test]
    fn a_staging_directory_left_by_a_killed_extractor_is_swept() {
        let cache = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = cache.path().join(format!(".staging-{dead}-abcdef"));
        std::fs::create_dir_all(left.join("command-guard")).unwrap();
        let target = cache.path().join("bundled-test");
        let located = locate_at(target.clone(), cache.path()).unwrap();
        assert_eq!(located.dir(), target);
        assert_eq!(entries(cache.path()), ["bundled-test"]);
    }

    #[test]
    fn a_failed_extraction_leaves_no_staging() {
        let cache = tempfile::tempdir().unwrap();
        // An incomplete directory in the way: the rename cannot replace it.
        let target = cache.path().join("bundled-test");
        std::fs::create_dir_all(target.join("debris")).unwrap();
        extract(&target).unwrap_err();
        assert_eq!(entries(cache.path()), ["bundled-test"]);
        assert_eq!(entries(&target), ["debris"]);
    }
}
