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
    for task in host.registry().tasks() {
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
        match &cluster {
            Some(c) => {
                tokio::spawn(schedule_clustered(
                    host.clone(),
                    c.clone(),
                    task.clone(),
                    period,
                    stop.clone(),
                ));
            }
            None => {
                tokio::spawn(schedule(host.clone(), task.clone(), period, stop.clone()));
            }
        }
    }
}

async fn schedule(host: Arc<Host>, task: ScheduledTask, period: Duration, stop: CancellationToken) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if task.stats.disabled() {
            return;
        }
        run_tick(&host, &task, &stop);
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
    stop: CancellationToken,
) {
    // Claimed by plugin and task name: the same on every replica.
    let id = format!("{}:{}", task.plugin, task.name);
    // The first tick is the first boundary after start.
    let mut last = ticks::tick_of(SystemTime::now(), period);
    loop {
        let wait = ticks::until_next_tick(SystemTime::now(), period);
        tokio::select! {
            _ = stop.cancelled() => return,
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
