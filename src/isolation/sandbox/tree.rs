//! The process tree: each confined worker in a cgroup (v2) of its own,
//! which plughost kills whole (`cgroup.kill`) as soon as the worker has
//! ended, however it ended. A child that called `setsid()` (or
//! double-forked away from its parent) is still in the cgroup, so it ends
//! with the worker; a process group alone would miss it.
//!
//! Without a writable cgroup (plughost is not root and systemd delegated
//! none), the worker's process group is all that is killed (as for
//! unconfined workers), which `setsid` children leave: said at start.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

/// The cgroups of this process's running workers, killed when plughost
/// exits ([`at_exit`]): a worker outlives plughost by the moment it takes
/// to see its stream close, and its `setsid` children would outlive both.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// One worker's cgroup.
#[derive(Debug)]
pub struct Tree {
    pub dir: PathBuf,
}

impl Tree {
    /// A new cgroup for a worker of plugin `key` under `parent`.
    pub fn create(parent: &std::path::Path, key: &str) -> std::io::Result<Tree> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let safe: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = parent.join(format!(
            "plughost-{}-{safe}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)?;
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            // SAFETY: registers a plain `extern "C" fn` with libc's exit
            // handlers; it only touches `LIVE` (with try_lock) and files.
            unsafe { libc::atexit(at_exit) };
        });
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dir.clone());
        Ok(Tree { dir })
    }

    /// Kill every process in the cgroup, then remove it (once empty).
    pub fn kill_and_remove(&self) {
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|d| d != &self.dir);
        let _ = std::fs::write(self.dir.join("cgroup.kill"), b"1");
        for _ in 0..200 {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        tracing::debug!(
            "sandbox: cgroup {} not removed (still busy)",
            self.dir.display()
        );
    }
}

/// At exit: kill every worker's cgroup still there, then remove them.
extern "C" fn at_exit() {
    let Ok(mut live) = LIVE.try_lock() else {
        return;
    };
    let dirs = std::mem::take(&mut *live);
    drop(live);
    for dir in &dirs {
        let _ = std::fs::write(dir.join("cgroup.kill"), b"1");
    }
    for dir in &dirs {
        for _ in 0..40 {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Kill and remove the cgroups left by plughost processes that are gone
/// (one killed before its exit handlers ran), under `parent`.
pub fn sweep(parent: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("plughost-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let stale = Tree { dir: entry.path() };
        stale.kill_and_remove();
    }
}
