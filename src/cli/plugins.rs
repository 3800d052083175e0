//! `plughost plugins install | remove | doctor`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use super::{Failure, RESTART};
use crate::config;
use crate::discovery::{discover, Source};
use crate::doctor::Report;
use crate::host::Host;
use crate::install::{self, InstallError};

impl From<InstallError> for Failure {
    fn from(e: InstallError) -> Failure {
        Failure::failed(e.to_string())
    }
}

pub(super) fn install(
    home: &Path,
    source: &str,
    enable: bool,
    force: bool,
    dialect: Option<&str>,
) -> Result<u8, Failure> {
    let spec = install::parse_source(source).map_err(|e| Failure::usage(e.to_string()))?;
    let dialect = match dialect.map(str::trim) {
        None => None,
        Some(name) => match crate::dialects::by_name(name) {
            Some(d) => Some(d.name()),
            None => {
                let known: Vec<&str> = crate::dialects::DIALECTS.iter().map(|d| d.name()).collect();
                return Err(Failure::usage(format!(
                    "--dialect '{name}' is not a dialect of this build; use one of: {}",
                    known.join(", ")
                )));
            }
        },
    };
    if enable || dialect.is_some() {
        // A config.json that cannot be edited is refused before anything is
        // installed, not after.
        config::read_plugin_lists(home)?;
        if dialect.is_some() {
            config::read_dialects(home)?;
        }
    }
    let done = install::install(home, &spec, force)?;
    let version = if done.version.is_empty() {
        String::new()
    } else {
        format!(" {}", done.version)
    };
    let verb = if done.replaced {
        "Replaced"
    } else {
        "Installed"
    };
    println!("{verb} {}{version} in {}.", done.name, done.path.display());
    if let Some(d) = dialect {
        config::set_dialect(home, &done.name, d)?;
        println!(
            "Loads as a {d} plugin (plugins.dialects.{} in config.json).",
            done.name
        );
    }
    if enable {
        config::enable_plugin(home, &done.name)?;
        println!("Enabled {}.", done.name);
    } else {
        println!(
            "It is not enabled; enable it with: plughost plugins enable {}",
            done.name
        );
    }
    println!("{RESTART}");
    Ok(0)
}

pub(super) fn remove(home: &Path, name: &str, yes: bool) -> Result<u8, Failure> {
    let lists = config::read_plugin_lists(home)?;
    let user_root = home.join("plugins");
    let user = discover(&[(Source::User, user_root.clone())], &lists);
    let Some(found) = user.iter().find(|c| c.key == name).or_else(|| {
        user.iter()
            .find(|c| c.dir.file_name().is_some_and(|d| d == name))
    }) else {
        let elsewhere = super::known_plugin_keys(home);
        if super::bundled_keys(home).iter().any(|k| k == name) {
            return Err(Failure::failed(format!(
                "'{name}' is a bundled plugin and cannot be removed; disable it instead: plughost plugins disable {name}"
            )));
        }
        if elsewhere.iter().any(|k| k == name) {
            return Err(Failure::failed(format!(
                "'{name}' is a project plugin (.plughost/plugins/); delete its directory there"
            )));
        }
        return Err(Failure::failed(format!(
            "no user plugin named '{name}' in {}; see: plughost plugins list",
            user_root.display()
        )));
    };
    let (key, dir) = (found.key.clone(), found.dir.clone());
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "refusing to remove '{key}' without confirmation: no terminal to ask on; pass -y to confirm"
            )));
        }
        eprint!("Remove plugin '{key}' and delete {}? [y/N] ", dir.display());
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
            println!("Nothing removed.");
            return Ok(1);
        }
    }
    install::remove_dir(&dir)?;
    config::update_plugin_lists(home, |l| {
        l.enabled.retain(|n| *n != key);
        l.disabled.retain(|n| *n != key);
    })?;
    println!("Removed {key} ({}).", dir.display());
    println!("{RESTART}");
    Ok(0)
}

pub(super) fn doctor(host: &Host, json: bool) -> Result<u8, Failure> {
    crate::runtime::Runtime::start(30).map_err(|e| Failure::failed(e.to_string()))?;
    let report = Report::new(host);
    if json {
        super::print_json(&report);
    } else {
        println!("{}", report.text());
    }
    Ok(if report.has_failures() { 1 } else { 0 })
}
