//! Running plugins' scheduled tasks ([`crate::core::schedule`]) inside
//! `plughost serve`: each task on its own timer, the first run one period
//! after the server starts (Felix's worker waits for the next minute), a
//! tick that finds the previous run still going skipped and counted, a
//! failure logged with its traceback and counted — never a reason for the
//! server or the next tick to stop.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::cluster::{ticks, Cluster};
use crate::core::schedule::{ScheduledTask, TaskRunOutcome};
use crate::host::Host;

/// Start every scheduled task of `host`'s registry; `every` replaces each
/// task's own period when given (`serve --cron-every`). Stops scheduling
/// when `stop` is cancelled; runs in progress then are dropped (cancelled).
pub fn start(host: &Arc<Host>, every: Option<Duration>, stop: CancellationToken) {
    start_in(host, None, every, stop)
}

/// [`start`], as one replica of `cluster` when given: ticks then fall on
/// multiples of the period since the Unix epoch (the same ticks on every
/// replica), and each is run by the one replica that claims it
/// ([`Cluster::claim_tick`]); a dead replica's ticks go to the live ones.
pub fn start_in(
    host: &Arc<Host>,
    cluster: Option<Arc<Cluster>>,
    every: Option<Duration>,
    stop: CancellationToken,
) {
    CronMount::new(cluster, every, stop).remount(host);
}

// Re-mounted on reload.
/// The scheduled tasks a server runs, following reloads: [`remount`]
/// keeps the timer of every task an unchanged plugin still has, stops the
/// timers of tasks that are gone or whose plugin changed (a run in progress
/// finishes), and starts the new ones.
///
/// [`remount`]: CronMount::remount
pub struct CronMount {
    cluster: Option<Arc<Cluster>>,
    every: Option<Duration>,
    /// Stops every timer and cancels runs in progress (the server stopping).
    stop: CancellationToken,
    /// The running timers: task identity and the token that stops it.
    running: std::sync::Mutex<Vec<(TaskId, CancellationToken)>>,
}

/// A task's identity across sets: its plugin, name and stats (an unchanged
/// plugin's task shares its stats; a new version's has new ones).
#[derive(PartialEq, Eq, Clone, Debug)]
struct TaskId(String, String, usize);

impl TaskId {
    fn of(task: &ScheduledTask) -> TaskId {
        TaskId(
            task.plugin.clone(),
            task.name.clone(),
            Arc::as_ptr(&task.stats) as usize,
        )
    }
}

/// What a re-mount changed: tasks started and stopped, by name.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CronChanges {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
}

impl CronMount {
    /// No timers yet; [`remount`](Self::remount) starts them.
    pub fn new(
        cluster: Option<Arc<Cluster>>,
        every: Option<Duration>,
        stop: CancellationToken,
    ) -> CronMount {
        CronMount {
            cluster,
            every,
            stop,
            running: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Make the timers those of the tasks of `host`'s set in force.
    pub fn remount(&self, host: &Arc<Host>) -> CronChanges {
        let registry = host.registry();
        let wanted: Vec<(TaskId, &ScheduledTask)> = registry
            .tasks()
            .iter()
            .map(|t| (TaskId::of(t), t))
            .collect();
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mut changes = CronChanges::default();
        running.retain(|(id, token)| {
            let keep = wanted.iter().any(|(w, _)| w == id);
            if !keep {
                token.cancel();
                tracing::info!(
                    "scheduled task '{}' of '{}' stopped (its plugin reloaded or went)",
                    id.1,
                    id.0
                );
                changes.stopped.push(id.1.clone());
            }
            keep
        });
        for (id, task) in wanted {
            if running.iter().any(|(r, _)| *r == id) {
                continue;
            }
            let timer = self.stop.child_token();
            start_one(
                host,
                self.cluster.as_ref(),
                self.every,
                task,
                (&timer, &self.stop),
            );
            changes.started.push(id.1.clone());
            running.push((id, timer));
        }
        changes
    }
}

/// Start one task's timer: `tokens.0` stops the timer, `tokens.1` also
/// cancels a run in progress.
fn start_one(
    host: &Arc<Host>,
    cluster: Option<&Arc<Cluster>>,
    every: Option<Duration>,
    task: &ScheduledTask,
    (timer, stop): (&CancellationToken, &CancellationToken),
) {
    let period = every.unwrap_or(task.every);
    tracing::info!(
        "scheduled task '{}' of '{}' runs every {} s{}",
        task.name,
        task.plugin,
        period.as_secs_f64(),
        if cluster.is_some() {
            ", once per cluster"
        } else {
            ""
        }
    );
    let ticks = Ticks {
        timer: timer.clone(),
        stop: stop.clone(),
    };
    match cluster {
        Some(c) => {
            tokio::spawn(schedule_clustered(
                host.clone(),
                c.clone(),
                task.clone(),
                period,
                ticks,
            ));
        }
        None => {
            tokio::spawn(schedule(host.clone(), task.clone(), period, ticks));
        }
    }
}

/// A timer's two tokens: `timer` ends the timer (a reload), `stop` also
/// cancels the run in progress (the server stopping).
#[derive(Clone)]
struct Ticks {
    timer: CancellationToken,
    stop: CancellationToken,
}

async fn schedule(host: Arc<Host>, task: ScheduledTask, period: Duration, tokens: Ticks) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tokens.timer.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if task.stats.disabled() {
            return;
        }
        run_tick(&host, &task, &tokens.stop);
    }
}

/// A run longer than the period must not delay the next tick's check: the
/// tick finds it running and is counted as skipped.
fn run_tick(host: &Arc<Host>, task: &ScheduledTask, stop: &CancellationToken) {
    let (host, task, stop) = (host.clone(), task.clone(), stop.clone());
    tokio::spawn(async move {
        let registry = host.registry();
        tokio::select! {
            _ = stop.cancelled() => {}
            outcome = task.run_scheduled(&registry) => report(&task, &outcome),
        }
    });
}

async fn schedule_clustered(
    host: Arc<Host>,
    cluster: Arc<Cluster>,
    task: ScheduledTask,
    period: Duration,
    tokens: Ticks,
) {
    let stop = tokens.stop.clone();
    // Claimed by plugin and task name: the same on every replica.
    let id = format!("{}:{}", task.plugin, task.name);
    // The first tick is the first boundary after start.
    let mut last = ticks::tick_of(SystemTime::now(), period);
    loop {
        let wait = ticks::until_next_tick(SystemTime::now(), period);
        tokio::select! {
            _ = tokens.timer.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if task.stats.disabled() {
            return;
        }
        let tick = ticks::tick_of(SystemTime::now(), period);
        if tick <= last {
            continue; // woke a little early
        }
        last = tick;
        match cluster.claim_tick(&id, tick).await {
            Ok(true) => run_tick(&host, &task, &stop),
            Ok(false) => {
                tracing::debug!("scheduled task '{id}': tick {tick} runs on another replica")
            }
            Err(e) => {
                tracing::warn!("scheduled task '{id}': cannot claim tick {tick}: {e}; skipped")
            }
        }
    }
}

/// Log one run's outcome the way a tool's failure is logged.
pub fn report(task: &ScheduledTask, outcome: &TaskRunOutcome) {
    match outcome {
        TaskRunOutcome::Completed => tracing::debug!("scheduled task '{}' ran", task.name),
        TaskRunOutcome::AlreadyRunning => tracing::warn!(
            "scheduled task '{}' of '{}' is still running from its last tick; this tick is skipped",
            task.name,
            task.plugin
        ),
        TaskRunOutcome::Skipped(reason) => {
            tracing::info!("scheduled task '{}' skipped: {reason}", task.name)
        }
        TaskRunOutcome::Disabled => {}
        TaskRunOutcome::Failed(e) => tracing::warn!(
            "scheduled task '{}' of '{}' failed: {}{}",
            task.name,
            task.plugin,
            e.message,
            e.traceback
                .as_deref()
                .map(|t| format!("\n{t}"))
                .unwrap_or_default()
        ),
    }
}
