//! `plugins install`: the installed plugin's options that have no value
//! yet (a Claude Code plugin's `userConfig`). On a terminal each is asked
//! for (a `sensitive` one without echo) and recorded in `config.json`
//! (`plugins.user_config.<plugin>.<key>`); an empty answer leaves it
//! unset. Elsewhere (a script, CI) plughost says which are missing and
//! how to set them. A value is never printed.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use crate::plugins::config;
use crate::plugins::format::DialectId;
use crate::plugins::install::user_config::{instructions, missing, UserOption};

use super::exit::Failure;

/// Ask for (or explain) the options of `plugin`, installed at `dir` as a
/// `dialect` plugin, that have no value.
pub(super) fn ask(
    home: &Path,
    plugin: &str,
    dialect: DialectId,
    dir: &Path,
) -> Result<(), Failure> {
    let Some(format) = crate::dialects::formats().all().find(|f| f.id() == dialect) else {
        return Ok(());
    };
    let left = missing(home, plugin, &format.user_options(dir))?;
    if left.is_empty() {
        return Ok(());
    }
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        println!("{}", instructions(plugin, &left));
        return Ok(());
    }
    println!("Plugin '{plugin}' has options to set (Enter leaves one unset):");
    let mut unset = Vec::new();
    for option in left {
        match read_value(&option) {
            Some(value) => {
                config::set_user_option(home, plugin, &option.key, &value)?;
                println!(
                    "  saved {} in config.json (plugins.user_config.{plugin}.{})",
                    option.key, option.key
                );
            }
            None => unset.push(option),
        }
    }
    if !unset.is_empty() {
        println!("{}", instructions(plugin, &unset));
    }
    Ok(())
}

/// One answer from the terminal; a sensitive option's is typed without
/// echo. `None`: nothing typed.
fn read_value(option: &UserOption) -> Option<String> {
    let hidden = if option.sensitive { ", hidden" } else { "" };
    print!("  {} ({}{hidden}): ", option.prompt, option.key);
    let _ = std::io::stdout().flush();
    let echo = option.sensitive.then(EchoOff::new).flatten();
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if echo.is_some() {
        println!();
    }
    drop(echo);
    let value = line.trim_end_matches(['\n', '\r']).to_string();
    (read.is_ok() && !value.is_empty()).then_some(value)
}

/// The terminal's echo switched off while it lives.
struct EchoOff(libc::termios);

impl EchoOff {
    fn new() -> Option<EchoOff> {
        // SAFETY: tcgetattr/tcsetattr on standard input with a termios
        // owned here; a failure (not a terminal) leaves echo as it was.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return None;
            }
            let mut quiet = saved;
            quiet.c_lflag &= !libc::ECHO;
            quiet.c_lflag |= libc::ECHONL;
            (libc::tcsetattr(0, libc::TCSANOW, &quiet) == 0).then_some(EchoOff(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `new` on standard input.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.0);
        }
    }
}
