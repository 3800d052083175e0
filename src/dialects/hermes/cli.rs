//! Hermes's `register_cli_command`: terminal subcommands a plugin adds
//! (`hermes <name> …` in Hermes), reachable as `plughost hermes <name> …`.
//!
//! As Hermes does, the command gets an `argparse` parser of its own,
//! `setup_fn(parser)` adds its arguments, `handler_fn` (when given) becomes
//! the parser's `func` default, and the parsed namespace is passed to
//! `func`. An `async def` handler is run to completion; an integer it
//! returns is the exit code.

use std::collections::BTreeMap;
use std::sync::Mutex;

use pyo3::prelude::*;

use crate::core::extensions::Extensions;
use crate::runtime::{attach, describe};

/// One registered command.
pub struct CliCommand {
    pub plugin: String,
    pub help: String,
    pub description: String,
    pub setup_fn: Py<PyAny>,
    pub handler_fn: Option<Py<PyAny>>,
}

/// The commands a host's Hermes plugins registered (in the host's
/// [`Extensions`]: two hosts keep two tables).
#[derive(Default)]
struct Commands(Mutex<BTreeMap<String, CliCommand>>);

/// Make the commands a plugin registered available on `host` (after it
/// loaded). A name another plugin already took is skipped with a warning,
/// as Hermes's argparse would refuse a second subparser of that name.
pub fn commit(host: &Extensions, plugin: &str, commands: Vec<(String, CliCommand)>) {
    let table = host.get::<Commands>();
    let mut table = table.0.lock().unwrap_or_else(|e| e.into_inner());
    table.retain(|_, c| c.plugin != plugin);
    for (name, command) in commands {
        if let Some(other) = table.get(&name) {
            tracing::warn!(
                "Hermes plugin '{plugin}' registers the CLI command '{name}', which plugin '{}' already registered; skipped",
                other.plugin
            );
            continue;
        }
        table.insert(name, command);
    }
}

/// `(name, help, plugin)` of every command of `host`, by name.
pub fn list(host: &Extensions) -> Vec<(String, String, String)> {
    host.get::<Commands>()
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(n, c)| (n.clone(), c.help.clone(), c.plugin.clone()))
        .collect()
}

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no Hermes plugin registered the CLI command '{name}'{known}")]
    Unknown { name: String, known: String },
    #[error("Hermes CLI command '{name}' of plugin '{plugin}' failed: {message}")]
    Failed {
        name: String,
        plugin: String,
        message: String,
    },
}

/// Run command `name` of `host` with `args`; its exit code.
pub fn run(host: &Extensions, name: &str, args: &[String]) -> Result<u8, CliError> {
    if name == "-h" || name == "--help" {
        // `plughost hermes -h`: what `plughost hermes` lists, with the usage.
        println!("Usage: plughost hermes NAME [ARGS]... (ARGS, -h included, are the command's)");
        for (name, help, plugin) in list(host) {
            println!("{name}  {help}  ({plugin})");
        }
        return Ok(0);
    }
    let table = host.get::<Commands>();
    let table = table.0.lock().unwrap_or_else(|e| e.into_inner());
    let Some(command) = table.get(name) else {
        let names: Vec<String> = table.keys().cloned().collect();
        return Err(CliError::Unknown {
            name: name.to_string(),
            known: if names.is_empty() {
                " (no loaded plugin registers any; see: plughost plugins list)".into()
            } else {
                format!(" (registered: {})", names.join(", "))
            },
        });
    };
    attach(|py| -> Result<u8, CliError> {
        let failed = |e: &PyErr| CliError::Failed {
            name: name.to_string(),
            plugin: command.plugin.clone(),
            message: describe(py, e),
        };
        let runner = py
            .import("_plughost_hermes")
            .and_then(|m| m.getattr("run_cli_command"))
            .map_err(|e| failed(&e))?;
        let code: i64 = runner
            .call1((
                name,
                &command.help,
                &command.description,
                command.setup_fn.bind(py),
                command.handler_fn.as_ref().map(|h| h.bind(py)),
                args.to_vec(),
            ))
            .and_then(|r| r.extract())
            .map_err(|e| failed(&e))?;
        Ok(code.clamp(0, 255) as u8)
    })
}
