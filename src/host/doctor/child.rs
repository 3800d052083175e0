//! `plugins doctor` survives the plugin it diagnoses: its checks run in a
//! child process (this program again), so a plugin whose `register()`
//! segfaults or calls `os._exit` ends the child, not the report. The crash
//! journal names the plugin the child was loading; it goes on the home's
//! isolated list and the checks run again, that plugin now loading in a
//! worker, where its crash is reported as its failure.

use std::path::Path;
use std::process::Command;

use crate::isolation::journal;

/// Set in the child that runs the checks.
const CHILD: &str = "PLUGHOST_DOCTOR_CHECKS";

/// How many crashing plugins one doctor run names before giving up.
const MOST_CRASHES: usize = 8;

/// In the parent: run this very command line in a child until it ends
/// with a status (each crash names its plugin on stderr and isolates it),
/// and give that status back. `None` in the child, which runs the checks
/// itself, or when this program cannot be started again (the checks then
/// run in-process, as before).
pub fn checked_in_child(home: &Path) -> Option<u8> {
    if std::env::var_os(CHILD).is_some() {
        return None;
    }
    // --- changed by c5 --- The wheel's console script runs under its
    // interpreter: started again by `sys.executable` (the command line's
    // arguments after it are the script's path, or `-m plughost`).
    let exe = if cfg!(feature = "extension-module") {
        crate::isolation::this_python().ok()?
    } else {
        std::env::current_exe().ok()?
    };
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    // Started again only when this process's own command line is the
    // doctor's (the binary, or the wheel's console script under its
    // interpreter); a program that calls the CLI with arguments of its own
    // gets the checks in-process, as before.
    if !args
        .windows(2)
        .any(|w| w[0] == "plugins" && w[1] == "doctor")
    {
        return None;
    }
    for _ in 0..MOST_CRASHES {
        let before = journal::read_list(home);
        let status = Command::new(&exe)
            .args(&args)
            .env(CHILD, "1")
            .status()
            .ok()?;
        // Inside a plugin's code when it ended (a signal, or an `os._exit`
        // with any status): its journal was left unfinished.
        let after = journal::quarantine(home);
        let caught: Vec<_> = after.iter().filter(|c| !before.contains(c)).collect();
        let how = match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(code), _) if caught.is_empty() => return Some(code.clamp(0, 255) as u8),
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(n)) => crate::isolation::supervisor::signal_name(n),
            (None, None) => "an unknown cause".into(),
        };
        if caught.is_empty() {
            eprintln!(
                "plughost: the checks of plugins doctor died of {how} outside any plugin's code"
            );
            return Some(1);
        }
        for c in caught {
            eprintln!(
                "plughost: plugin '{}' crashed plughost ({how} during {}); it runs isolated from now on (remove it from {} to run it in-process); checking again with it in a worker",
                c.key,
                c.what,
                journal::isolated_list(home).display()
            );
        }
    }
    eprintln!("plughost: more than {MOST_CRASHES} plugins crashed the checks; giving up");
    Some(1)
}
