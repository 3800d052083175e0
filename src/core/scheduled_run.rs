//! A scheduled task's run in a host: the gates of
//! [`Point::ScheduledRun`] first, then the job
//! ([`ScheduledTask::run_once`]); a task that fails too often in a row is
//! disabled and [`Point::ScheduledDisabled`] fires.

use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};

use super::hooks::{LoopContext, Point};
use super::registry::Registry;
use super::schedule::{ScheduledTask, TaskRunOutcome, MAX_CONSECUTIVE_FAILURES};

impl ScheduledTask {
    /// What the gates are shown: the run descriptor.
    fn descriptor(&self) -> Map<String, Value> {
        let d = json!({
            "name": self.name,
            "plugin": self.plugin,
            "every_seconds": self.every.as_secs_f64(),
            "runs": self.stats.runs(),
            "failures": self.stats.failures(),
            "consecutive_failures": self.stats.consecutive.load(Ordering::Relaxed),
        });
        match d {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    /// Fire the lanes of `point` with the run descriptor; what they left.
    async fn fire_point(&self, registry: &Registry, point: Point) -> Map<String, Value> {
        let mut lc = LoopContext {
            params: self.descriptor(),
            ..Default::default()
        };
        crate::core::loop_points::fire_lanes(registry, point, &mut lc).await;
        lc.params
    }

    /// One scheduled run in `registry`'s host: skipped when the task is
    /// disabled or a gate says so, else [`run_once`](Self::run_once); a
    /// failure that makes [`MAX_CONSECUTIVE_FAILURES`] in a row disables
    /// the task and fires [`Point::ScheduledDisabled`].
    pub async fn run_scheduled(&self, registry: &Registry) -> TaskRunOutcome {
        if self.stats.disabled() {
            return TaskRunOutcome::Disabled;
        }
        let gated = self.fire_point(registry, Point::ScheduledRun).await;
        if gated.get("skip").is_some_and(|v| v.as_bool() == Some(true)) {
            self.stats.gated.fetch_add(1, Ordering::Relaxed);
            let reason = gated
                .get("skip_reason")
                .and_then(Value::as_str)
                .unwrap_or("skipped by a gate")
                .to_string();
            return TaskRunOutcome::Skipped(reason);
        }
        let outcome = self.run_once().await;
        if let TaskRunOutcome::Failed(_) = outcome {
            let in_a_row = self.stats.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
            if in_a_row >= MAX_CONSECUTIVE_FAILURES
                && !self.stats.disabled.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    "scheduled task '{}' of '{}' failed {in_a_row} times in a row: disabled until plughost restarts",
                    self.name,
                    self.plugin
                );
                self.fire_point(registry, Point::ScheduledDisabled).await;
            }
        } else if let TaskRunOutcome::Completed = outcome {
            self.stats.consecutive.store(0, Ordering::Relaxed);
        }
        outcome
    }
}
