//! The runtime a process holds: [`Runtime::start`] builds it once with its
//! [`Settings`], every host is built from it, and its clones share it.
//!
//! CPython has one interpreter per process and it can be set up only
//! once, so the runtime is backed by a process-wide cell: the first
//! [`Runtime::start`] (or the first host built without a runtime, which
//! asks for [`Runtime::current`]) fixes the settings; asking again for the
//! same settings returns the running runtime, asking for other ones is a
//! [`RuntimeError::Mismatch`] naming both, never a silent first-wins.
//!
//! What it owns: the interpreter's settings (the interpreter itself starts
//! when the first plugin needs it), and the process's one tokio runtime
//! (built when first used; its worker threads are marked as plughost's
//! and keep their Python thread states). A worker process of an isolated
//! plugin is another process, with a runtime of its own.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::{Interpreter, StartError};

/// What a [`Runtime`] is started with.
///
/// Two runtimes asked for in one process must have equal settings (see
/// [`RuntimeError::Mismatch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Settings {
    python_log_level: u8,
    worker_threads: Option<usize>,
}

impl Default for Settings {
    /// Python `logging` forwarded at warning level (30), tokio's default
    /// number of worker threads (one per core).
    fn default() -> Settings {
        Settings {
            python_log_level: 30,
            worker_threads: None,
        }
    }
}

impl Settings {
    /// Forward Python `logging` at `level` into `tracing` (10 debug … 40
    /// error); 0 forwards nothing: an embedding Python application keeps
    /// its own logging set-up (the wheel).
    pub fn python_log_level(mut self, level: u8) -> Settings {
        self.python_log_level = level;
        self
    }

    /// The process's tokio runtime gets `n` worker threads (at least one)
    /// instead of one per core.
    pub fn worker_threads(mut self, n: usize) -> Settings {
        self.worker_threads = Some(n.max(1));
        self
    }

    /// The level Python `logging` is forwarded at (0: not forwarded).
    pub fn log_level(&self) -> u8 {
        self.python_log_level
    }

    /// The tokio runtime's worker threads, when set (else one per core).
    pub fn threads(&self) -> Option<usize> {
        self.worker_threads
    }
}

impl std::fmt::Display for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "python_log_level {}, ", self.python_log_level)?;
        match self.worker_threads {
            Some(n) => write!(f, "worker_threads {n}"),
            None => f.write_str("worker_threads one per core"),
        }
    }
}

/// Errors asking for a runtime.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// This process's runtime runs with other settings than those asked
    /// for (the interpreter is set up once per process): start the runtime
    /// once and pass it to every host.
    #[error("this process's plughost runtime runs with {running}, not with {asked} ({}); the interpreter is set up once per process: start the runtime once (Runtime::start) and build every host from it", differences(.running, .asked))]
    Mismatch { running: Settings, asked: Settings },
}

/// What differs between the `running` settings and the `asked` ones.
fn differences(running: &Settings, asked: &Settings) -> String {
    let threads = |n: Option<usize>| n.map_or("one per core".to_string(), |n| n.to_string());
    let mut differ = Vec::new();
    if running.python_log_level != asked.python_log_level {
        differ.push(format!(
            "python_log_level {} asked, {} running",
            asked.python_log_level, running.python_log_level
        ));
    }
    if running.worker_threads != asked.worker_threads {
        differ.push(format!(
            "worker_threads {} asked, {} running",
            threads(asked.worker_threads),
            threads(running.worker_threads)
        ));
    }
    differ.join("; ")
}

/// What hosts are built from, as wasmtime's `Linker::new(&engine)` is: the
/// process's runtime ([`Runtime::start`], [`Runtime::current`]), or
/// [`Runtime::none`] for hosts of native parts that must never start
/// CPython. Cheap to clone (an [`Arc`]); clones are the same runtime.
#[derive(Clone)]
pub struct Runtime {
    /// `None`: [`Runtime::none`].
    shared: Option<Arc<Shared>>,
}

/// The process's runtime: its settings and its tokio runtime.
struct Shared {
    settings: Settings,
    tokio: OnceLock<tokio::runtime::Runtime>,
}

/// The process's runtime, once started.
static PROCESS: OnceLock<Arc<Shared>> = OnceLock::new();

impl Runtime {
    /// The process's runtime with `settings`: started now if none runs
    /// (the interpreter itself starts when a plugin first needs it, the
    /// tokio runtime when first used), the running one if it has the same
    /// settings, else [`RuntimeError::Mismatch`].
    pub fn start(settings: Settings) -> Result<Runtime, RuntimeError> {
        let shared = PROCESS.get_or_init(|| Shared::new(settings));
        if shared.settings != settings {
            return Err(RuntimeError::Mismatch {
                running: shared.settings,
                asked: settings,
            });
        }
        Ok(Runtime::of(shared))
    }

    /// The process's runtime: the running one, whatever its settings, else
    /// one started with the default [`Settings`]. What a host built without
    /// a runtime is built from.
    pub fn current() -> Runtime {
        Runtime::of(PROCESS.get_or_init(|| Shared::new(Settings::default())))
    }

    /// The running process's runtime, if one was started.
    pub fn running() -> Option<Runtime> {
        PROCESS.get().map(Runtime::of)
    }

    /// The process's runtime forwarding Python `logging` at `level`: the
    /// running one when its level is `level` (its other settings are
    /// not asked about), else one started with the defaults and `level`.
    pub fn with_log_level(level: u8) -> Result<Runtime, RuntimeError> {
        let asked = Settings::default().python_log_level(level);
        let shared = PROCESS.get_or_init(|| Shared::new(asked));
        if shared.settings.python_log_level != level {
            return Err(RuntimeError::Mismatch {
                running: shared.settings,
                asked: shared.settings.python_log_level(level),
            });
        }
        Ok(Runtime::of(shared))
    }

    /// The process's runtime ([`Runtime::current`]): hosts built from it
    /// run Python plugins.
    pub fn python() -> Runtime {
        Runtime::current()
    }

    /// A runtime without Python: hosts built from it never start CPython
    /// (their Python plugins fail to load saying so). It starts nothing
    /// and fixes no settings; what it runs on tokio (an MCP server's
    /// connection) runs on the process's runtime.
    pub fn none() -> Runtime {
        Runtime { shared: None }
    }

    fn of(shared: &Arc<Shared>) -> Runtime {
        Runtime {
            shared: Some(Arc::clone(shared)),
        }
    }

    /// Its settings; `None` for [`Runtime::none`].
    pub fn settings(&self) -> Option<Settings> {
        self.shared.as_ref().map(|s| s.settings)
    }

    /// Whether hosts built from it may run Python plugins.
    pub fn has_python(&self) -> bool {
        self.shared.is_some()
    }

    /// The level Python `logging` is forwarded at; `None` without Python.
    pub fn log_level(&self) -> Option<u8> {
        self.settings().map(|s| s.python_log_level)
    }

    /// The interpreter, started now (once per process) if it is not yet.
    ///
    /// Safe to call from many threads at once (hosts built in parallel):
    /// the first caller installs, the others wait with the GIL released.
    pub fn interpreter(&self) -> Result<&'static Interpreter, StartError> {
        match &self.shared {
            Some(shared) => Interpreter::start(shared.settings.python_log_level),
            None => Err(StartError(
                "this host was built from Runtime::none(), which runs no Python".into(),
            )),
        }
    }

    /// The process's one tokio runtime (built on first use): what
    /// plughost's own threads run on (the CLI's commands, the wheel's
    /// agent turns and blocking calls, MCP connections). Its threads are
    /// marked as plughost's ([`super::thread_started`]) and keep their
    /// Python thread states. A [`Runtime::none`] hands out the process's
    /// ([`Runtime::current`]'s).
    pub fn tokio(&self) -> &'static tokio::runtime::Runtime {
        match &self.shared {
            Some(_) => process_tokio(),
            None => Runtime::current().tokio(),
        }
    }

    /// The interpreter, when it has been started.
    pub fn get() -> Option<&'static Interpreter> {
        super::RUNTIME.get()
    }

    /// The directories Python imports from (`sys.path`, an active
    /// virtualenv's site-packages last), where dialects look for installed
    /// entry points; empty for a runtime without Python.
    pub fn search_path(&self) -> &'static [PathBuf] {
        if self.has_python() {
            super::sys_path()
        } else {
            &[]
        }
    }

    /// Initialise the interpreter now (not plughost's runtime half) when a
    /// host of this runtime found plugins that will need it: reading
    /// [`search_path`](Self::search_path) in-process then costs nothing more,
    /// where a host that found none reads it from a child process.
    pub fn initialize_for_plugins(&self) {
        if self.has_python() {
            pyo3::Python::initialize();
        }
    }

    /// Whether [`initialize_for_plugins`](Self::initialize_for_plugins)
    /// would start the interpreter now (it has Python, not started yet).
    pub(crate) fn would_initialize(&self) -> bool {
        // SAFETY: Py_IsInitialized only reads the runtime's state flag; it
        // may be called before (and without) Py_Initialize.
        self.has_python() && unsafe { pyo3::ffi::Py_IsInitialized() } == 0
    }
}

impl Default for Runtime {
    /// [`Runtime::current`].
    fn default() -> Runtime {
        Runtime::current()
    }
}

impl PartialEq for Runtime {
    /// The same runtime (two [`Runtime::none`] are equal).
    fn eq(&self, other: &Runtime) -> bool {
        match (&self.shared, &other.shared) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for Runtime {}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.settings() {
            Some(s) => write!(f, "Runtime({s})"),
            None => f.write_str("Runtime(none)"),
        }
    }
}

impl Shared {
    fn new(settings: Settings) -> Arc<Shared> {
        Arc::new(Shared {
            settings,
            tokio: OnceLock::new(),
        })
    }
}

/// The process's tokio runtime (see [`Runtime::tokio`]); the process's
/// runtime starts with the default settings if none runs.
pub(crate) fn process_tokio() -> &'static tokio::runtime::Runtime {
    let shared = PROCESS.get_or_init(|| Shared::new(Settings::default()));
    shared.tokio.get_or_init(|| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = shared.settings.worker_threads {
            builder.worker_threads(n);
        }
        builder
            .enable_all()
            .thread_name("plughost-worker")
            .on_thread_start(super::thread_started)
            .build()
            .expect("a tokio runtime")
    })
}

/// Wait on this thread for `future`, run on the process's tokio runtime,
/// from anywhere: synchronous code, a task of another runtime, or a task
/// of this one (its worker is handed over meanwhile, `block_in_place`, so
/// the runtime keeps running what the future waits for). `None` when the
/// future did not finish (it panicked).
pub fn wait_on_process<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    process_tokio().spawn(async move {
        let _ = tx.send(future.await);
    });
    let on_worker = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_worker {
        tokio::task::block_in_place(|| rx.recv().ok())
    } else {
        rx.recv().ok()
    }
}
