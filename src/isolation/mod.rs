//! Crash isolation: a plugin chosen by the user runs in its own worker
//! process, so a segfault, an `os._exit`, an `abort()` or a spin in its
//! code costs only the calls it had in flight, never plughost.
//!
//! The worker is the same program started again with the hidden
//! [`WORKER_ARG`] subcommand (the wheel starts its interpreter with
//! [`worker_main`] instead); it loads the plugin through its dialect
//! exactly as plughost does in-process and serves a small typed protocol
//! ([`protocol`]) on a socket that was its stdin/stdout. The parent side
//! ([`supervisor`]) restarts a dead worker with backoff and gives up on a
//! plugin that crashes too often; [`proxy`] makes the worker's tools, hooks
//! and commands look like any other plugin's to the registry.
//!
//! A Rust program that embeds plughost and isolates plugins either calls
//! [`serve_if_worker`] first thing in `main` (then its own executable is
//! the worker), or names a plughost binary with
//! `HostBuilder::worker_command` (the host's builder).

pub mod around;
pub mod guard;
// --- iso-parity (issue 47): worker→host calls ---
pub mod host_link;
pub mod inherit;
pub mod interpreter;
pub mod journal;
pub mod limits;
mod loop_edits;
pub mod protocol;
pub mod proxy;
// --- issue 50: kernel confinement of workers ---
pub mod sandbox;
pub mod supervisor;
pub mod worker;
// --- issue 26 item 5 ---
pub mod batch;
mod worker_batch;
// --- iso-runtime: per-call cancel (issue 47 item 2) ---
mod worker_calls;
mod worker_input;
mod worker_parts;
mod worker_platforms;
mod worker_plugin;
mod worker_routes;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use supervisor::{
    read_replies_on, LoadSpec, RepliesRuntime, Supervisor, WorkerState, WorkerStatus,
};

use crate::core::outcome::PluginError;
use crate::core::registry::Registration;

/// The hidden subcommand that makes the plughost binary a worker.
pub const WORKER_ARG: &str = "__worker";

/// How to start a worker process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl WorkerCommand {
    /// This very executable with [`WORKER_ARG`] (the plughost binary, or a
    /// program that calls [`serve_if_worker`]). In the wheel (the console
    /// script, an application importing it) this process is a Python
    /// interpreter: workers are then [`WorkerCommand::python`] of its
    /// `sys.executable`, the path it was started by (a virtualenv's
    /// `bin/python`, which finds the wheel), not the resolved binary
    /// `current_exe` names (the base interpreter, which may not).
    pub fn current_exe() -> std::io::Result<WorkerCommand> {
        if cfg!(feature = "extension-module") {
            return Ok(WorkerCommand::python(this_python()?));
        }
        Ok(WorkerCommand {
            program: std::env::current_exe()?,
            args: vec![WORKER_ARG.into()],
        })
    }

    /// A plughost binary at `program`.
    pub fn binary(program: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand {
            program: program.into(),
            args: vec![WORKER_ARG.into()],
        }
    }

    /// A Python interpreter with the plughost wheel installed.
    pub fn python(executable: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand {
            program: executable.into(),
            args: vec![
                "-c".into(),
                "from plughost._native import Host; Host._worker_main()".into(),
            ],
        }
    }
}

/// `sys.executable` of the interpreter this process runs (the wheel's).
pub fn this_python() -> std::io::Result<PathBuf> {
    use pyo3::prelude::*;
    let found = crate::runtime::try_attach(|py| {
        py.import("sys")
            .and_then(|sys| sys.getattr("executable"))
            .and_then(|e| e.extract::<PathBuf>())
            .ok()
            .filter(|p| !p.as_os_str().is_empty())
    })
    .ok()
    .flatten();
    found.ok_or_else(|| std::io::Error::other("sys.executable names no interpreter"))
}

/// How isolated plugins are run.
#[derive(Clone, Debug)]
pub struct Settings {
    pub command: WorkerCommand,
    /// How long loading (`register()`) may take in a worker.
    pub load_timeout: Duration,
    /// This many crashes within [`Settings::breaker_window`] disable the
    /// plugin for the rest of the process.
    pub breaker_crashes: u32,
    pub breaker_window: Duration,
    /// The worker's Python `logging` level.
    pub python_log_level: u8,
}

/// Defaults: `register()` may take 10 s (Hermes's
/// `plugins.load_timeout_seconds`); 3 crashes in 60 s trip the breaker.
pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_BREAKER_CRASHES: u32 = 3;
pub const DEFAULT_BREAKER_WINDOW: Duration = Duration::from_secs(60);

/// Load a plugin in a worker: its registrations (each served by the
/// worker: tools, hooks, commands, routes, tasks, auth modes, sinks) and
/// its supervisor, or why loading failed (raised, crashed, timed out).
pub fn load(
    spec: LoadSpec,
    settings: Settings,
) -> Result<(Vec<Registration>, Supervisor), PluginError> {
    let renderer =
        crate::dialects::by_name(&spec.dialect).and_then(|d| d.abilities().renderers?.renderer());
    let (sup, contributions) = Supervisor::start(spec, settings)?;
    let mut registrations = proxy::registrations(&sup, contributions);
    if let Some(renderer) = renderer {
        for r in &mut registrations {
            if let Registration::Tool(tool) = r {
                tool.renderer = Some(renderer.clone());
            }
        }
    }
    Ok((registrations, sup))
}

/// What isolated plugins' workers recorded for `plugins doctor` (their
/// dialect's provider and member lines, what they registered that is not
/// used), by plugin key: a worker's dialect state is in the worker, so the
/// worker sends these when the plugin loads.
#[derive(Default)]
pub struct WorkerReports(std::sync::Mutex<std::collections::HashMap<String, Recorded>>);

/// A worker's `(providers, not_used)` lines.
type Recorded = (Vec<String>, Vec<String>);

impl WorkerReports {
    fn record(&self, key: &str, providers: Vec<String>, not_used: Vec<String>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), (providers, not_used));
    }

    /// `(providers, not_used)` of plugin `key`'s worker, if it sent any.
    pub fn of(&self, key: &str) -> Option<Recorded> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }
}

/// When this process was started as a worker (its first argument is
/// [`WORKER_ARG`]), serve and exit; otherwise return at once. Call it first
/// thing in `main` of a program that embeds plughost and isolates plugins.
pub fn serve_if_worker() {
    if std::env::args_os().nth(1).is_some_and(|a| a == WORKER_ARG) {
        worker::main();
    }
}

/// Serve as a worker on this process's stdin/stdout (the wheel's entry).
pub fn worker_main() -> ! {
    worker::main()
}
