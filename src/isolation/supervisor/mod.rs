//! The parent side of one isolated plugin: starting its worker, sending
//! requests and routing replies, noticing the worker's death, restarting
//! it with backoff, and the breaker that gives up on a plugin that keeps
//! crashing.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::protocol::{Contribution, Reply, Request};
use super::Settings;
use crate::core::outcome::{PluginError, PluginFault};
use crate::plugins::config::ResourceLimits;

mod live;
mod process;
mod reactor;
mod reader;
mod stream;

pub use live::signal_name;
use live::{Live, Pending, Waiter};
pub use process::WorkerProcess;
pub use reactor::{read_replies_on, RepliesRuntime};
use reader::{off_the_runtime, recv_reply, wait_blocking, Abandon};
pub use stream::Stream;

/// What loading the plugin in a worker needs.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub key: String,
    pub dir: PathBuf,
    pub home: PathBuf,
    pub dialect: String,
    /// The OS limits its worker runs under.
    pub limits: ResourceLimits,
    /// It declares itself a guard ([`crate::isolation::guard`]): its hooks
    /// fail closed, its breaker open included.
    pub guard: bool,
    /// iso-parity: where its worker's calls into the host run (issue 47).
    pub host: crate::isolation::host_link::HostSide,
}

/// What a call is, for the log and the reason a worker was stopped
/// (formatted only then: a call costs no allocation for it).
#[derive(Clone, Debug)]
pub enum Subject {
    Tool(Arc<str>),
    /// A hook, by the event name its plugin subscribed with.
    Hook(Arc<str>),
    Command(Arc<str>),
    /// A request to its HTTP routes, by its path.
    Route(Arc<str>),
    /// A run of its scheduled task, by name.
    Task(Arc<str>),
    /// A judgement of its auth mode, by name.
    Auth(Arc<str>),
    /// A call of its model provider, by name.
    Model(Arc<str>),
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Tool(name) => write!(f, "tool '{name}'"),
            Subject::Hook(event) => write!(f, "a {event} hook"),
            Subject::Command(name) => write!(f, "command '/{name}'"),
            Subject::Route(path) => write!(f, "the request to {path}"),
            Subject::Task(name) => write!(f, "task '{name}'"),
            Subject::Auth(mode) => write!(f, "auth mode '{mode}'"),
            Subject::Model(name) => write!(f, "a call of model provider '{name}'"),
        }
    }
}

struct State {
    live: Option<Arc<Live>>,
    /// When recent crashes happened (within the breaker's window).
    crashes: VecDeque<Instant>,
    /// Every crash since the plugin loaded.
    total_crashes: u64,
    /// Crashes in a row of workers that answered no call: a plugin
    /// crashing in a loop, which the backoff slows down.
    looping: u32,
    disabled: Option<PluginFault>,
}

/// What the supervisor of an isolated plugin knows (`plugins doctor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerStatus {
    pub state: WorkerState,
    /// The running worker's process id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Crashes since the plugin loaded.
    pub crashes: u64,
    /// Crashes within the breaker's window: `breaker_crashes` of them
    /// disable the plugin.
    pub recent_crashes: u32,
    pub breaker_crashes: u32,
    pub breaker_window_seconds: u64,
    /// While restarting: how long the backoff holds the next start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start_in_ms: Option<u64>,
    /// A guard: while it is disabled (or restarting) the events it guards
    /// are refused, not let through.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fail_closed: bool,
    /// How the kernel confines its worker (`sandbox: …`, issue 50).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// The state of an isolated plugin's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// A worker serves its calls.
    Running,
    /// Its worker ended; the next call starts one (after the backoff).
    Restarting,
    /// The breaker is open: it crashed too often and stays off until
    /// plughost restarts (calls fail at once).
    Disabled,
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Running => "running",
            WorkerState::Restarting => "restarting",
            WorkerState::Disabled => "disabled",
        }
    }
}

struct Inner {
    load: LoadSpec,
    settings: Settings,
    state: Mutex<State>,
    /// Held while a worker starts, so one caller starts it and the others
    /// wait; the state lock itself is never held across a start (the
    /// reader of a worker dying while loading needs it).
    starting: Mutex<()>,
    /// The confinement of its latest worker (issue 50), `None` when off.
    /// and the line doctor shows; `None` before the first start.
    sandbox: Mutex<Option<(Option<crate::isolation::sandbox::Policy>, String)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(live) = state.live.take() {
            // iso-parity: its teardown (`on_unload`) runs first, bounded.
            live.unload(UNLOAD_LIMIT);
            live.kill(Some("plughost is done with it".into()));
        }
    }
}

/// The supervisor of one isolated plugin (shared by its proxies).
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl Supervisor {
    /// Start the worker and load the plugin in it: its contributions, or
    /// why it failed (a raised error, a crash, a timeout).
    pub fn start(
        load: LoadSpec,
        settings: Settings,
    ) -> Result<(Supervisor, Vec<Contribution>), PluginError> {
        let sup = Supervisor {
            inner: Arc::new(Inner {
                load,
                settings,
                state: Mutex::new(State {
                    live: None,
                    crashes: VecDeque::new(),
                    total_crashes: 0,
                    looping: 0,
                    disabled: None,
                }),
                starting: Mutex::new(()),
                sandbox: Mutex::new(None),
            }),
        };
        sup.inner.load.host.attach(sup.downgrade());
        let (live, contributions) = sup.spawn()?;
        sup.lock().live = Some(live);
        Ok((sup, contributions))
    }

    pub fn key(&self) -> &str {
        &self.inner.load.key
    }

    /// How the kernel confines its worker (`None`: unconfined, its
    /// `sandbox` is `false`).
    pub fn sandbox(&self) -> Option<crate::isolation::sandbox::Policy> {
        self.inner
            .sandbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|(policy, _)| policy.clone())
    }

    /// Whether the plugin declares itself a guard (fails closed).
    pub fn is_guard(&self) -> bool {
        self.inner.load.guard
    }

    /// The plugin API the plugin is loaded through.
    pub fn dialect(&self) -> &str {
        &self.inner.load.dialect
    }

    /// The plugin's dialect in this build's table.
    pub fn dialect_table(&self) -> Option<&'static dyn crate::dialects::Dialect> {
        crate::dialects::by_name(self.dialect())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the plugin is off for the rest of the process, if the breaker tripped.
    pub fn disabled(&self) -> Option<PluginFault> {
        self.lock().disabled.clone()
    }

    /// Its worker's state, crash counts and breaker, as of now.
    pub fn status(&self) -> WorkerStatus {
        let settings = &self.inner.settings;
        let state = self.lock();
        let window = settings.breaker_window;
        let recent = match &state.disabled {
            // The crashes that opened the breaker.
            Some(PluginFault::Disabled { crashes, .. }) => *crashes,
            _ => state
                .crashes
                .iter()
                .filter(|t| t.elapsed() <= window)
                .count() as u32,
        };
        let live = state.live.as_ref().filter(|l| !l.has_ended());
        let (worker_state, pid, next_start) = if state.disabled.is_some() {
            (WorkerState::Disabled, None, None)
        } else if let Some(live) = live {
            let pid = live.child.lock().unwrap_or_else(|e| e.into_inner()).id();
            (WorkerState::Running, Some(pid), None)
        } else {
            let wait = state.crashes.back().map_or(Duration::ZERO, |last| {
                backoff(state.looping).saturating_sub(last.elapsed())
            });
            (WorkerState::Restarting, None, Some(wait.as_millis() as u64))
        };
        WorkerStatus {
            state: worker_state,
            pid,
            crashes: state.total_crashes,
            recent_crashes: recent,
            breaker_crashes: settings.breaker_crashes,
            breaker_window_seconds: window.as_secs(),
            next_start_in_ms: next_start,
            fail_closed: self.inner.load.guard,
            sandbox: self
                .inner
                .sandbox
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|(_, line)| line.clone()),
        }
    }

    /// Start a worker process and load the plugin in it.
    fn spawn(&self) -> Result<(Arc<Live>, Vec<Contribution>), PluginError> {
        let key = self.inner.load.key.clone();
        let unavailable = |problem: String| {
            PluginError::fault(PluginFault::Unavailable {
                plugin: key.clone(),
                problem,
            })
        };
        let (ours, theirs) = UnixStream::pair()
            .map_err(|e| unavailable(format!("cannot make the worker's socket: {e}")))?;
        let theirs_out = theirs
            .try_clone()
            .map_err(|e| unavailable(format!("cannot make the worker's socket: {e}")))?;
        let command = &self.inner.settings.command;
        let mut process = worker_process(command, &self.inner.load);
        // --- issue 50: the kernel's confinement, set up for the child ---
        let program = std::path::PathBuf::from(process.get_program());
        let mut confined =
            crate::isolation::sandbox::spawn::prepare(&mut process, &self.inner.load, &program)
                .map_err(&unavailable)?;
        let mut limits = self.inner.load.limits;
        if let Some(c) = &confined {
            limits.memory_mb = match (limits.memory_mb, c.policy.memory_mb) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        *self.inner.sandbox.lock().unwrap_or_else(|e| e.into_inner()) = {
            let policy = confined.as_ref().map(|c| c.policy.clone());
            let line = crate::isolation::sandbox::line(&self.inner.load.key, policy.as_ref());
            Some((policy, line))
        };
        let (stdin, stdout) = (OwnedFd::from(theirs), OwnedFd::from(theirs_out));
        let spawned = match confined.as_mut() {
            Some(c) => c.spawn_worker(&mut process, stdin, stdout),
            None => WorkerProcess::spawn(&mut process, stdin, stdout),
        };
        drop(process);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(c) = confined {
                    c.abandoned();
                }
                return Err(unavailable(format!(
                    "cannot start its worker {}: {e}",
                    command.program.display()
                )));
            }
        };
        let watch = confined
            .as_ref()
            .map(|c| crate::isolation::sandbox::denials::Watch::of(&c.policy));
        if let Some(c) = confined {
            if let Err(problem) = c.started(child.id()) {
                // SAFETY: a signal to the worker's own process group, which
                // exists while the unreaped child does.
                unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
                let _ = child.wait();
                return Err(unavailable(problem));
            }
        }
        let reader = ours
            .try_clone()
            .map_err(|e| unavailable(format!("cannot read the worker's socket: {e}")))?;
        let watched = ours
            .try_clone()
            .map_err(|e| unavailable(format!("cannot watch the worker: {e}")))?;
        live::watch_process(&key, child.id(), watched)
            .map_err(|e| unavailable(format!("cannot start its watcher thread: {e}")))?;
        let live = Arc::new(Live {
            key: key.clone(),
            child: Mutex::new(child),
            stream: Mutex::new(ours),
            pending: Mutex::new(Pending::default()),
            next_id: AtomicU64::new(1),
            stop_reason: Mutex::new(None),
            exceeded: Mutex::new(None),
            wedged: Mutex::new(None),
            answered: std::sync::atomic::AtomicBool::new(false),
            host: self.inner.load.host.clone(),
        });
        reactor::read_replies(live.clone(), reader, Arc::downgrade(&self.inner))
            .map_err(|e| unavailable(format!("cannot start its reader thread: {e}")))?;

        let load = &self.inner.load;
        let limit = self.inner.settings.load_timeout;
        let request = Request::Load {
            key: key.clone(),
            dir: load.dir.clone(),
            home: load.home.clone(),
            dialect: load.dialect.clone(),
            python_log_level: self.inner.settings.python_log_level,
            limits,
            sandbox: watch,
        };
        let answer = wait_blocking(&live, request, limit, "register()");
        load_answered(live, answer, limit, unavailable)
    }

    /// The running worker, started (after the backoff) when there is none.
    fn live(&self) -> Result<Arc<Live>, PluginError> {
        let current = || -> Result<Option<Arc<Live>>, PluginError> {
            let mut state = self.lock();
            if let Some(fault) = &state.disabled {
                return Err(PluginError::fault(fault.clone()));
            }
            match &state.live {
                Some(live) if !live.has_ended() && !live.is_stopped() => Ok(Some(live.clone())),
                _ => {
                    // Dead or stopped, and its reader may not have cleared it yet.
                    state.live = None;
                    Ok(None)
                }
            }
        };
        if let Some(live) = current()? {
            return Ok(live);
        }
        // Waiting for another caller's start, the backoff and the start
        // itself block: off the runtime, whose tasks may read the replies.
        // SAFETY: the start captures no Python reference (the supervisor's
        // state, locks and the process it spawns).
        unsafe {
            off_the_runtime(|| {
                let _starting = self
                    .inner
                    .starting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // Another caller may have started one meanwhile.
                if let Some(live) = current()? {
                    return Ok(live);
                }
                let wait = {
                    let state = self.lock();
                    state.crashes.back().map_or(Duration::ZERO, |last| {
                        backoff(state.looping).saturating_sub(last.elapsed())
                    })
                };
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                let (live, _) = self.spawn()?;
                tracing::info!("restarted the worker of plugin '{}'", self.key());
                self.lock().live = Some(live.clone());
                Ok(live)
            })
        }
    }

    /// Send `body` and await the reply. Dropping the future before the
    /// reply comes (a time limit, a cancelled turn) cancels that call in
    /// the worker ([`Request::Cancel`]); the worker's other calls go on.
    pub async fn request(&self, body: Request, what: Subject) -> Result<Reply, PluginError> {
        let live = self.live()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = live
            .send(body, Waiter::Async(tx))
            .map_err(PluginError::fault)?;
        let mut guard = Abandon {
            live: &live,
            id,
            what,
            armed: true,
        };
        let reply = rx.await;
        guard.armed = false;
        match reply {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(fault)) => Err(PluginError::fault(fault)),
            Err(_) => Err(PluginError::fault(PluginFault::Unavailable {
                plugin: self.key().to_string(),
                problem: "its worker dropped the call".into(),
            })),
        }
    }

    /// The host home the plugin was loaded for.
    pub fn home(&self) -> &std::path::Path {
        &self.inner.load.home
    }

    /// The state of the host that loaded the plugin (none for a bare
    /// [`crate::isolation::load`]).
    pub fn host_state(&self) -> Option<Arc<crate::core::extensions::Extensions>> {
        self.inner.load.host.state()
    }

    /// A handle that does not keep the plugin's worker alive.
    pub fn downgrade(&self) -> WeakSupervisor {
        WeakSupervisor(Arc::downgrade(&self.inner))
    }

    /// Whether `other` supervises the same plugin process slot.
    pub fn same(&self, other: &Supervisor) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Tell the running worker (if any: a worker started since knows
    /// nothing of the turn) to drop its state of turn `number`, now (a
    /// plugin may free something it holds then). Unanswered: a reply woke
    /// plughost's side for nothing every turn.
    pub fn forget_turn(&self, number: u64) {
        let live = self.lock().live.clone();
        if let Some(live) = live.filter(|l| !l.has_ended()) {
            live.send_unanswered(Request::ForgetTurn { turn: number });
        }
    }

    /// Ask the running worker, if there is one, without starting one and
    /// without stopping it when it is slow to answer (it may be busy with
    /// another call): `None` when no worker runs; a time-out is an error
    /// and the reply, if it comes later, is dropped.
    pub fn ask_if_running(
        &self,
        body: Request,
        limit: Duration,
    ) -> Option<Result<Reply, PluginFault>> {
        let live = {
            let state = self.lock();
            if state.disabled.is_some() {
                return None;
            }
            state
                .live
                .as_ref()
                .filter(|l| !l.has_ended() && !l.is_stopped())?
                .clone()
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let id = match live.send(body, Waiter::Blocking(tx)) {
            Ok(id) => id,
            Err(fault) => return Some(Err(fault)),
        };
        Some(match recv_reply(&rx, limit) {
            Ok(r) => r,
            Err(_) => {
                live.forget(id);
                Err(PluginFault::TimedOut {
                    plugin: live.key.clone(),
                    after_ms: limit.as_millis() as u64,
                })
            }
        })
    }

    /// Send `body` and block for the reply, at most `limit`; past it the
    /// call is cancelled in the worker, which serves on.
    pub fn request_blocking(
        &self,
        body: Request,
        limit: Duration,
        what: &str,
    ) -> Result<Reply, PluginError> {
        let live = self.live()?;
        // Past the limit only this call is given up on (cancelled in the
        // worker); the worker's other calls go on (issue 47).
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let id = live
            .send(body, Waiter::Blocking(tx))
            .map_err(PluginError::fault)?;
        match recv_reply(&rx, limit) {
            Ok(r) => r.map_err(PluginError::fault),
            Err(_) => {
                tracing::info!(
                    "{what} of plugin '{}' ran past {} s; it is cancelled in its worker",
                    live.key,
                    crate::core::outcome::seconds_text(limit)
                );
                live.cancel(id);
                Err(PluginError::fault(PluginFault::TimedOut {
                    plugin: live.key.clone(),
                    after_ms: limit.as_millis() as u64,
                }))
            }
        }
    }
}

/// A [`Supervisor`] that may be gone (its host dropped).
#[derive(Clone)]
pub struct WeakSupervisor(Weak<Inner>);

impl WeakSupervisor {
    pub fn upgrade(&self) -> Option<Supervisor> {
        self.0.upgrade().map(|inner| Supervisor { inner })
    }
}

/// The process a worker runs as: the program and arguments of `command`
/// (the one place that chooses what runs the worker), in a process group
/// of its own, so what its plugin forks is killed with it.
fn worker_process(
    command: &super::WorkerCommand,
    load: &crate::isolation::LoadSpec,
) -> std::process::Command {
    // The plugin's own environment, if any (supply's interpreter choice).
    let mut process = super::interpreter::command(command, load);
    std::os::unix::process::CommandExt::process_group(&mut process, 0);
    process
}

/// How long a plugin's teardown in its worker may take when plughost is
/// done with it (Hermes's own unload waits up to 2 s for its tasks).
const UNLOAD_LIMIT: Duration = Duration::from_secs(3);

/// After `looping` crashes in a row of workers that answered no call
/// (each died loading, or in its first call), wait this long before the
/// next start: nothing after one such crash, then 50 ms doubling per
/// crash, at most 2 s. A worker that served calls before it crashed is
/// started again at once, however often that happens (the breaker still
/// counts every crash): the wait is only for a plugin crashing in a loop,
/// where starting at once would spin (issue 47).
fn backoff(looping: u32) -> Duration {
    let recent = looping;
    if recent <= 1 {
        return Duration::ZERO;
    }
    let ms = 50u64.saturating_mul(1 << (recent - 2).min(6));
    Duration::from_millis(ms.min(2000))
}

/// What a worker's answer to `Load` makes of it: its contributions, or
/// the plugin's failure (the worker stopped, unless it is gone already).
fn load_answered(
    live: Arc<Live>,
    answer: Result<Reply, PluginFault>,
    limit: Duration,
    unavailable: impl Fn(String) -> PluginError,
) -> Result<(Arc<Live>, Vec<Contribution>), PluginError> {
    match answer {
        Ok(Reply::Loaded {
            contributions,
            version,
        }) => {
            if let Some(problem) = other_version(version.as_deref()) {
                live.kill(Some("it runs another plughost version".into()));
                return Err(unavailable(problem));
            }
            if version.is_none() {
                tracing::warn!(
                    "plugin '{}': its worker does not say which plughost it runs (its wheel was built before workers said so); should it misbehave, put this build's wheel in <home>/wheels and run `plughost plugins deps sync`",
                    live.key
                );
            }
            Ok((live, contributions))
        }
        Ok(Reply::LoadFailed { error }) => {
            live.kill(Some("its plugin failed to load".into()));
            Err(error)
        }
        Ok(other) => {
            live.kill(Some("it answered out of protocol".into()));
            Err(unavailable(format!("it answered {other:?} to Load")))
        }
        // The in-process wording (`crate::host::load`), the fault kept.
        Err(fault @ PluginFault::TimedOut { .. }) => {
            let mut error = PluginError::fault(fault);
            error.message = format!(
                "register() did not return within {} s (plugins.load_timeout_seconds); the plugin is abandoned",
                crate::core::outcome::seconds_text(limit)
            );
            Err(error)
        }
        Err(fault) => Err(PluginError::fault(fault)),
    }
}

/// What is wrong when a worker runs plughost `theirs` (what it said in
/// `Loaded`) rather than this version: the worker protocol is not
/// versioned across releases, so another version's worker would answer
/// in a shape this host misreads. `None`: the same version, or a worker
/// that does not say (built before workers said it: 0.1.0, whose protocol
/// takes the field as optional; it loads with a warning).
fn other_version(theirs: Option<&str>) -> Option<String> {
    let ours = env!("CARGO_PKG_VERSION");
    let theirs = theirs.filter(|v| *v != ours)?;
    Some(format!(
        "its worker runs plughost {theirs} and this is plughost {ours} (the plugin's own environment was built by another plughost version): build it again for this one with `plughost plugins deps sync`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_applies_only_to_repeated_crashes() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), Duration::from_millis(50));
        assert_eq!(backoff(3), Duration::from_millis(100));
        assert_eq!(backoff(20), Duration::from_millis(2000));
    }

    #[test]
    fn a_worker_of_another_plughost_version_is_refused_with_the_fix() {
        assert_eq!(other_version(Some(env!("CARGO_PKG_VERSION"))), None);
        let older = other_version(Some("0.0.1")).unwrap();
        assert!(older.contains("runs plughost 0.0.1"), "{older}");
        assert!(older.contains("plughost plugins deps sync"), "{older}");
        assert_eq!(other_version(None), None, "a worker from before the field");
    }
}
