//! The process tree: each confined worker in a cgroup (v2) of its own,
//! which plughost kills whole (`cgroup.kill`) as soon as the worker has
//! ended, however it ended. A child that called `setsid()` (or
//! double-forked away from its parent) is still in the cgroup, so it ends
//! with the worker; a process group alone would miss it.
//!
//! Without a writable cgroup (plughost is not root and systemd delegated
//! none), the worker's process group is all that is killed (as for
//! unconfined workers), which `setsid` children leave: said at start.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One worker's cgroup.
#[derive(Debug)]
pub struct Tree {
    pub dir: PathBuf,
    /// `<dir>/cgroup.procs`, for the child to move itself in.
    pub procs: CString,
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
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(std::io::Error::other)?;
        Ok(Tree { dir, procs })
    }

    /// Kill every process in the cgroup, then remove it (once empty).
    pub fn kill_and_remove(&self) {
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
