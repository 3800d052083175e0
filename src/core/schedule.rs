//! Background jobs plugins contribute (Felix's `cron_tasks`): what a
//! serving host runs on a schedule, and `plughost cron run NAME` runs now.
//!
//! Plain Rust, no Python: a dialect adapts its plugin's job to [`TaskRun`]
//! and says how often it runs. A run in a host, behind the gates of its
//! points, is [`crate::core::scheduled_run`]'s.
//! A task never runs twice at once in one host ([`ScheduledTask::run_once`]
//! answers [`TaskRunOutcome::AlreadyRunning`] instead), and its runs,
//! failures and last error are counted where `plugins doctor` and
//! `/metrics` read them ([`TaskStats`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::outcome::PluginError;
use super::points::BoxFuture;

/// Failures in a row after which a task is disabled until the host
/// restarts (Codumentor's schedules are "auto-disabled after too many
/// consecutive failures"; plughost's number).
pub const MAX_CONSECUTIVE_FAILURES: u64 = 5;

/// A scheduled job's body.
pub trait TaskRun: Send + Sync + 'static {
    /// One run; `Err` is the job's own failure (with its traceback).
    fn run(&self) -> BoxFuture<Result<(), PluginError>>;
}

/// Counters of one task, shared by every copy of it.
#[derive(Default, Debug)]
pub struct TaskStats {
    running: AtomicBool,
    runs: AtomicU64,
    failures: AtomicU64,
    overlaps: AtomicU64,
    pub(super) gated: AtomicU64,
    pub(super) consecutive: AtomicU64,
    pub(super) disabled: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl TaskStats {
    /// Runs started (finished or not).
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }
    /// Runs that failed.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
    /// Ticks skipped because the previous run had not finished.
    pub fn overlaps(&self) -> u64 {
        self.overlaps.load(Ordering::Relaxed)
    }
    /// Runs a gate lane ([`Point::ScheduledRun`](crate::core::points::Point::ScheduledRun)) skipped.
    pub fn gated(&self) -> u64 {
        self.gated.load(Ordering::Relaxed)
    }
    /// Whether the task was disabled after failing too often in a row.
    pub fn disabled(&self) -> bool {
        self.disabled.load(Ordering::Relaxed)
    }
    /// Whether a run is in progress now.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }
    /// The last failure's message, if the task ever failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

/// How one [`ScheduledTask::run_once`] ended.
#[derive(Debug)]
pub enum TaskRunOutcome {
    Completed,
    Failed(PluginError),
    /// The previous run is still going: this one was not started.
    AlreadyRunning,
    /// A gate skipped the run, saying why.
    Skipped(String),
    /// The task is disabled (it failed too often in a row).
    Disabled,
}

/// One plugin's scheduled job.
#[derive(Clone)]
pub struct ScheduledTask {
    /// The name users run it by (`plughost cron run NAME`): Felix's
    /// `plugin_<task name>`.
    pub name: String,
    /// The plugin that registered it.
    pub plugin: String,
    /// Time between the starts of two runs.
    pub every: Duration,
    pub run: Arc<dyn TaskRun>,
    pub stats: Arc<TaskStats>,
}

impl std::fmt::Debug for ScheduledTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledTask")
            .field("name", &self.name)
            .field("plugin", &self.plugin)
            .field("every", &self.every)
            .finish()
    }
}

/// Clears the running flag however the run ends (a panic or a dropped
/// future included).
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ScheduledTask {
    pub fn new(name: String, plugin: String, every: Duration, run: Arc<dyn TaskRun>) -> Self {
        ScheduledTask {
            name,
            plugin,
            every,
            run,
            stats: Arc::default(),
        }
    }

    /// Run the job once, unless it is already running; count the result.
    pub async fn run_once(&self) -> TaskRunOutcome {
        if self
            .stats
            .running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.stats.overlaps.fetch_add(1, Ordering::Relaxed);
            return TaskRunOutcome::AlreadyRunning;
        }
        let _running = Running(&self.stats.running);
        self.stats.runs.fetch_add(1, Ordering::Relaxed);
        match self.run.run().await {
            Ok(()) => TaskRunOutcome::Completed,
            Err(e) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = self.stats.last_error.lock() {
                    *last = Some(e.message.clone());
                }
                TaskRunOutcome::Failed(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Gate(tokio::sync::Semaphore, AtomicU64);

    impl TaskRun for Arc<Gate> {
        fn run(&self) -> BoxFuture<Result<(), PluginError>> {
            let gate = self.clone();
            Box::pin(async move {
                gate.1.fetch_add(1, Ordering::SeqCst);
                let _p = gate.0.acquire().await.expect("open");
                Err(PluginError::native("boom"))
            })
        }
    }

    #[tokio::test]
    async fn a_task_never_runs_twice_at_once_and_counts_failures() {
        let gate = Arc::new(Gate(tokio::sync::Semaphore::new(0), AtomicU64::new(0)));
        let task = ScheduledTask::new(
            "t".into(),
            "p".into(),
            Duration::from_secs(60),
            Arc::new(gate.clone()),
        );
        let first = {
            let task = task.clone();
            tokio::spawn(async move { task.run_once().await })
        };
        while gate.1.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(
            task.run_once().await,
            TaskRunOutcome::AlreadyRunning
        ));
        gate.0.add_permits(1);
        assert!(matches!(first.await.unwrap(), TaskRunOutcome::Failed(_)));
        assert_eq!(
            (
                task.stats.runs(),
                task.stats.failures(),
                task.stats.overlaps()
            ),
            (1, 1, 1)
        );
        assert_eq!(task.stats.last_error().as_deref(), Some("boom"));
        assert!(!task.stats.running());
    }
}
