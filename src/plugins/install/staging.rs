//! Scratch directories that carry their owner's pid, and the sweep that
//! removes those an interrupted process (killed mid-install, mid-extraction)
//! left behind.
//!
//! A scratch directory is named `<kind><pid>-<random>`. It is stale when
//! its owner is dead, or when the process now holding that pid started after
//! the directory was last changed (the pid was reused). A name without a pid
//! (left by an older plughost) is stale once it is older than the running
//! process and than [`LEGACY_GRACE`]: such a name cannot say whose it is.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// How old a scratch directory without a pid must be before it is swept.
pub const LEGACY_GRACE: Duration = Duration::from_secs(600);

/// Slack between a process's start time (whole seconds of boot time plus
/// clock ticks) and a directory's modification time.
const CLOCK_SLACK: Duration = Duration::from_secs(2);

/// The name prefix for a scratch directory of this process: `kind` then
/// the pid then `-`; `tempfile` adds the random part.
pub fn prefix(kind: &str) -> String {
    format!("{kind}{}-", std::process::id())
}

/// Remove the stale scratch directories named `kind…` in `parent`; the
/// number removed. Best effort: a directory that cannot be removed is
/// logged and left, and nothing else in `parent` is touched.
pub fn sweep(parent: &Path, kind: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(kind)) else {
            continue;
        };
        // Never follow a link: only real directories are scratch.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let changed = meta.modified().unwrap_or(SystemTime::now());
        if !is_stale(rest, changed) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                tracing::info!(
                    "removed {}, left by an interrupted plughost",
                    entry.path().display()
                );
                removed += 1;
            }
            Err(e) => tracing::warn!(
                "could not remove {}, left by an interrupted plughost: {e}; delete it by hand",
                entry.path().display()
            ),
        }
    }
    removed
}

/// `rest` is the name after the kind: `<pid>-<random>` or, from an older
/// plughost, just `<random>`.
fn is_stale(rest: &str, changed: SystemTime) -> bool {
    let pid = rest
        .split_once('-')
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
        .filter(|pid| *pid > 0);
    match pid {
        Some(pid) => match process_state(pid) {
            ProcessState::Dead => true,
            ProcessState::Alive { started } => started.is_some_and(|s| s > changed + CLOCK_SLACK),
        },
        None => {
            let old_enough = changed.elapsed().is_ok_and(|age| age > LEGACY_GRACE);
            let before_us =
                process_started(std::process::id()).is_some_and(|s| changed + CLOCK_SLACK < s);
            old_enough && before_us
        }
    }
}

enum ProcessState {
    Dead,
    /// Running (or not ours to signal); when it started, if that is known.
    Alive {
        started: Option<SystemTime>,
    },
}

fn process_state(pid: u32) -> ProcessState {
    #[cfg(unix)]
    {
        let Ok(pid_t) = libc::pid_t::try_from(pid) else {
            return ProcessState::Dead;
        };
        // SAFETY: kill with signal 0 sends nothing; it only asks whether
        // the process exists and may be signalled.
        let rc = unsafe { libc::kill(pid_t, 0) };
        if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return ProcessState::Dead;
        }
    }
    ProcessState::Alive {
        started: process_started(pid),
    }
}

/// When process `pid` started (Linux `/proc`; `None` elsewhere or when it
/// cannot be read).
fn process_started(pid: u32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the
    // last ')'. Field 22 (start time in clock ticks since boot) is the 20th
    // after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let per_second = u64::try_from(clock_ticks_per_second())
        .ok()
        .filter(|t| *t > 0)?;
    let since_boot = Duration::from_secs(ticks / per_second)
        + Duration::from_millis((ticks % per_second) * 1000 / per_second);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + since_boot)
}

#[cfg(unix)]
fn clock_ticks_per_second() -> libc::c_long {
    // SAFETY: sysconf only reads a configuration value.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }
}

#[cfg(not(unix))]
fn clock_ticks_per_second() -> u64 {
    100
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_dead_owners_directory_goes_and_a_live_ones_stays() {
        let parent = tempfile::tempdir().unwrap();
        let dead = parent.path().join(format!(".x-{}-abc", dead_pid()));
        let ours = parent.path().join(format!("{}abc", prefix(".x-")));
        let other = parent.path().join("x-1-unrelated");
        for d in [&dead, &ours, &other] {
            std::fs::create_dir_all(d.join("inner")).unwrap();
        }
        assert_eq!(sweep(parent.path(), ".x-"), 1);
        assert!(!dead.exists());
        assert!(ours.exists(), "this process is alive and owns it");
        assert!(other.exists(), "another kind is not touched");
    }

    #[test]
    fn a_directory_older_than_its_owners_start_is_a_reused_pid() {
        let changed = SystemTime::now() - Duration::from_secs(24 * 3600);
        let me = std::process::id();
        // This process started well after a day-old directory was changed.
        if process_started(me).is_some() {
            assert!(is_stale(&format!("{me}-abc"), changed));
        }
        assert!(!is_stale(&format!("{me}-abc"), SystemTime::now()));
    }

    #[test]
    fn a_name_without_a_pid_goes_only_when_old() {
        let old = SystemTime::now() - Duration::from_secs(24 * 3600);
        if process_started(std::process::id()).is_some() {
            assert!(is_stale("abcdef", old));
        }
        assert!(!is_stale("abcdef", SystemTime::now()));
    }

    #[test]
    fn a_link_named_like_scratch_is_left_alone() {
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"x").unwrap();
        let link = parent.path().join(format!(".x-{}-abc", dead_pid()));
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        assert_eq!(sweep(parent.path(), ".x-"), 0);
        assert!(outside.path().join("keep").exists());
    }
}
