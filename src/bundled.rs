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

fn extract(target: &Path) -> std::io::Result<()> {
    let parent = target.parent().expect("target has a parent");
    std::fs::create_dir_all(parent)?;
    let staging = parent.join(format!(".staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    for f in files() {
        let path = staging.join(f.path());
        std::fs::create_dir_all(path.parent().expect("file has a parent"))?;
        std::fs::write(&path, f.contents())?;
    }
    std::fs::write(staging.join(".complete"), b"")?;
    match std::fs::rename(&staging, target) {
        Ok(()) => Ok(()),
        // Another process got there first: its copy is the same content.
        Err(_) if target.join(".complete").is_file() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}
