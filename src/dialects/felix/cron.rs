//! Felix's `cron_tasks`: each `PluginCronTask(name, run)` of a registered
//! plugin object becomes a core [`ScheduledTask`] named `plugin_<name>`,
//! run as Felix's worker runs it: `await run()` with no arguments, once a
//! minute ([`FELIX_CRON_EVERY`]).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::core::hooks::BoxFuture;
use crate::core::outcome::PluginError;
use crate::core::schedule::{ScheduledTask, TaskRun};
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, try_attach};

/// How often a Felix cron task runs: Felix's worker schedules every
/// plugin cron task `* * * * *` (once a minute) and awaits `run()` with no
/// arguments.
pub const FELIX_CRON_EVERY: Duration = Duration::from_secs(60);

/// One plugin cron task's `run` callable.
struct FelixCron {
    run: Py<PyAny>,
}

impl TaskRun for FelixCron {
    fn run(&self) -> BoxFuture<Result<(), PluginError>> {
        let started = try_attach(|py| {
            let awaitable = match self.run.bind(py).call0() {
                Ok(a) => a,
                Err(e) => return Err(plugin_error(py, &e)),
            };
            match bridge::resolve(py, awaitable) {
                Awaited::Ready(r) => r.map(|_| None).map_err(|e| plugin_error(py, &e)),
                Awaited::Pending(task) => Ok(Some(task)),
            }
        });
        Box::pin(async move {
            let task = match started {
                Ok(Ok(None)) => return Ok(()),
                Ok(Ok(Some(task))) => task,
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(PluginError::native(e.to_string())),
            };
            match task.await {
                Ok(_) => Ok(()),
                Err(e) => try_attach(|py| plugin_error(py, &e))
                    .map_or_else(|e| Err(PluginError::native(e.to_string())), Err),
            }
        })
    }
}

/// The scheduled task of one `(name, run)` pair `_plughost_felix.load`
/// returned for plugin `key`.
pub(super) fn task(key: &str, name: &str, run: Py<PyAny>) -> ScheduledTask {
    ScheduledTask::new(
        format!("plugin_{name}"),
        key.to_string(),
        FELIX_CRON_EVERY,
        Arc::new(FelixCron { run }),
    )
}
