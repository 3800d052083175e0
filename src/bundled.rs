//! The plugins that ship inside the binary (`plugins_bundled/`).
//!
//! They are compiled in, so an installed binary finds them wherever it runs
//! from, and written out once per content version to a cache directory
//! (plugins are ordinary directories on disk: their skills and data files
//! are read by path). `PLUGHOST_BUNDLED_DIR` points elsewhere instead (the
//! wheel uses it for the copy it ships).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use include_dir::{include_dir, Dir, DirEntry};

static BUNDLED: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/plugins_bundled");

/// The directory to scan for bundled plugins.
pub fn bundled_dir(home: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("PLUGHOST_BUNDLED_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let target = cache_root(home).join(format!(
        "bundled-{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        content_hash()
    ));
    if target.join(".complete").is_file() {
        return target;
    }
    match extract(&target) {
        Ok(()) => target,
        Err(e) => {
            tracing::warn!(
                "could not write the bundled plugins to {}: {e}",
                target.display()
            );
            target
        }
    }
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
    let staging = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(parent)?;
    for f in files() {
        let path = staging.path().join(f.path());
        std::fs::create_dir_all(path.parent().expect("file has a parent"))?;
        std::fs::write(&path, f.contents())?;
    }
    std::fs::write(staging.path().join(".complete"), b"")?;
    match std::fs::rename(staging.path(), target) {
        Ok(()) => Ok(()),
        // Another extractor got there first: its copy is the same content.
        Err(_) if target.join(".complete").is_file() => Ok(()),
        Err(e) => Err(e),
    }
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
