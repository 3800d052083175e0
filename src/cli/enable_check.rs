//! `plugins enable NAME` loads the plugin before it records it: in a child
//! process (this command line again), so a plugin whose `register()`
//! segfaults or calls `os._exit` ends the child, not the command, and the
//! user hears what it would register or why it fails — never a silent
//! "Enabled" for a plugin every later command trips over.

use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{build_host_enabling, home_of, Cli, Exit, Failure, RESTART};
use crate::plugins::config;
use crate::runtime::Runtime;

/// Set in the child that loads the plugin.
const CHILD: &str = "PLUGHOST_ENABLE_CHECK";

/// The child's answer line starts with this (a plugin may print on stdout
/// while it loads).
const MARK: &str = "plughost-enable-check ";

/// `plugins enable NAME`: the plugin is loaded first, in a child
/// (below); it is enabled when it loads (saying what it
/// registers), refused with why and where when it does not, unless
/// `force`. A name no installed plugin has is handled by [`set_enabled`](super::plugins::set_enabled).
pub(super) fn enable(
    cli: &Cli,
    runtime: &crate::runtime::Runtime,
    name: &str,
    force: bool,
) -> Result<Exit, Failure> {
    if name.trim().is_empty()
        || !super::plugins::known_plugin_keys(&home_of(cli))
            .iter()
            .any(|k| k == name)
    {
        return super::plugins::set_enabled(cli, name, true, force);
    }
    // An unusable config.json is reported first: it is the bigger problem.
    config::read_plugin_lists(&home_of(cli))?;
    let (loads, why, checked) = match in_child() {
        Outcome::Checked(c) if c.loaded => (Some(c.provides.clone()), None, Some(c)),
        Outcome::Checked(c) => {
            let why = c.error.clone().unwrap_or_else(|| "it did not load".into());
            (None, Some(why), Some(c))
        }
        Outcome::Crashed(how) => (
            None,
            Some(format!("it ended the process that loaded it ({how})")),
            None,
        ),
        Outcome::NotRun => {
            let host = super::build_host_enabling(cli, runtime, name)?;
            match host.plugins().iter().find(|p| p.key == name) {
                Some(p) if p.loaded => (Some(super::plugins::provides(&host, p)), None, None),
                Some(p) => (
                    None,
                    Some(p.error.clone().unwrap_or_else(|| "it did not load".into())),
                    None,
                ),
                None => (None, Some("it was not found when loading".into()), None),
            }
        }
    };
    match (loads, why) {
        (Some(what), _) => {
            config::enable_plugin(&home_of(cli), name)?;
            println!("Enabled {name} (it loads: {what}).");
            println!("{RESTART}");
            Ok(Exit::Success)
        }
        (None, Some(why)) if force => {
            eprintln!(
                "plughost: warning: plugin '{name}' fails to load: {why}; enabled anyway (--force)"
            );
            super::plugins::set_enabled(cli, name, true, true)
        }
        (None, why) => Err(refusal(
            name,
            why.as_deref().unwrap_or("it did not load"),
            checked.as_ref(),
        )),
    }
}

/// What loading the plugin showed.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Checked {
    pub loaded: bool,
    /// "2 tools, 1 hook" (what it registers), when it loaded.
    pub provides: String,
    /// Why it did not load.
    pub error: Option<String>,
    /// The exception's type (`ModuleNotFoundError`), when loading raised.
    pub kind: Option<String>,
    /// The plugin's own innermost frame, when loading raised.
    pub at: Option<String>,
    pub traceback: Option<String>,
}

/// Whether this process is the child that loads the plugin.
pub(super) fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// In the child: load the plugin `name` (enabled on top of config.json's
/// lists), print what that showed as one marked JSON line, and end.
pub(super) fn run_child(cli: &Cli, runtime: &Runtime, name: &str) -> Result<Exit, Failure> {
    let host = build_host_enabling(cli, runtime, name)?;
    let records = host.plugins();
    let record = records.iter().find(|p| p.key == name);
    let checked = match record {
        Some(p) => Checked {
            loaded: p.loaded,
            provides: super::plugins::provides(&host, p),
            error: p.error.clone(),
            kind: p.failure.as_ref().map(|f| f.kind.clone()),
            at: p.failure.as_ref().and_then(|f| f.location.clone()),
            traceback: p.failure.as_ref().and_then(|f| f.traceback.clone()),
        },
        None => Checked {
            loaded: false,
            provides: String::new(),
            error: Some("no plugin of that name was found when loading".into()),
            kind: None,
            at: None,
            traceback: None,
        },
    };
    println!(
        "{MARK}{}",
        serde_json::to_string(&checked).expect("serialises")
    );
    Ok(Exit::Success)
}

/// How the check in the child went.
pub(super) enum Outcome {
    Checked(Checked),
    /// The child died (a signal, or an exit without its answer).
    Crashed(String),
    /// No child could be started (a program calling the CLI with arguments
    /// of its own): the caller loads it in-process.
    NotRun,
}

/// In the parent: run this command line again in a child that loads the
/// plugin, and say how that went.
pub(super) fn in_child() -> Outcome {
    let exe = if cfg!(feature = "extension-module") {
        crate::isolation::this_python().ok()
    } else {
        std::env::current_exe().ok()
    };
    let Some(exe) = exe else {
        return Outcome::NotRun;
    };
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if !args
        .windows(2)
        .any(|w| w[0] == "plugins" && w[1] == "enable")
    {
        return Outcome::NotRun;
    }
    let out = match Command::new(&exe)
        .args(&args)
        .env(CHILD, "1")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
    {
        Ok(out) => out,
        Err(_) => return Outcome::NotRun,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if let Some(checked) = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(MARK))
        .and_then(|json| serde_json::from_str::<Checked>(json).ok())
    {
        return Outcome::Checked(checked);
    }
    let how = match (
        out.status.code(),
        std::os::unix::process::ExitStatusExt::signal(&out.status),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(n)) => crate::isolation::supervisor::signal_name(n),
        (None, None) => "an unknown cause".into(),
    };
    Outcome::Crashed(how)
}

/// The refusal of a plugin that does not load, saying why, where and what
/// to do.
pub(super) fn refusal(name: &str, why: &str, checked: Option<&Checked>) -> Failure {
    let mut message = format!("plugin '{name}' fails to load: {why}");
    if let Some(c) = checked {
        if let Some(at) = &c.at {
            message.push_str(&format!("\n  at: {at}"));
        }
        if let Some(tb) = &c.traceback {
            message.push('\n');
            message.push_str(tb.trim_end());
        }
        if c.kind.as_deref() == Some("ModuleNotFoundError") {
            message.push_str(
                "\nIf it is a dependency it declares, install them with: plughost plugins deps sync",
            );
        }
    }
    message.push_str(&format!(
        "\nIt was not enabled; fix it, then run: plughost plugins enable {name} (or pass --force to enable it anyway)"
    ));
    Failure::failed(message)
}
