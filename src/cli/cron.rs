//! `plughost cron list` and `plughost cron run NAME`: the plugins'
//! scheduled tasks (Felix's `cron_tasks`), listed, or one run now — the
//! same run `plughost serve` makes on its timer.

use serde_json::json;

use super::exit::{Exit, Failure};
use super::{build_host, print_json, Cli};
use crate::core::schedule::TaskRunOutcome;

/// `cron list`.
pub(super) fn list(cli: &Cli, python_level: u8, json: bool) -> Result<Exit, Failure> {
    let host = build_host(cli, python_level)?;
    let registry = host.registry();
    let tasks = registry.tasks();
    if json {
        let rows: Vec<_> = tasks
            .iter()
            .map(|t| json!({"name": t.name, "plugin": t.plugin, "every_seconds": t.every.as_secs_f64()}))
            .collect();
        print_json(&rows);
    } else if tasks.is_empty() {
        println!("No scheduled tasks: no loaded plugin has cron tasks.");
    } else {
        for t in tasks {
            println!(
                "{}  (plugin {}, every {} s under plughost serve)",
                t.name,
                t.plugin,
                t.every.as_secs_f64()
            );
        }
    }
    Ok(Exit::Success)
}

/// `cron run NAME`, on the process's runtime.
pub(super) fn run(
    rt: &tokio::runtime::Runtime,
    cli: &Cli,
    python_level: u8,
    name: &str,
) -> Result<Exit, Failure> {
    let host = build_host(cli, python_level)?;
    let registry = host.registry();
    let Some(task) = registry.task(name).cloned() else {
        let known: Vec<&str> = registry.tasks().iter().map(|t| t.name.as_str()).collect();
        return Err(Failure::failed(if known.is_empty() {
            format!("no scheduled task '{name}': no loaded plugin has cron tasks")
        } else {
            format!(
                "no scheduled task '{name}'; the loaded ones are: {} (plughost cron list)",
                known.join(", ")
            )
        }));
    };
    match rt.block_on(task.run_scheduled(&host.registry())) {
        TaskRunOutcome::Completed => {
            println!("{}: done", task.name);
            Ok(Exit::Success)
        }
        TaskRunOutcome::Failed(e) => {
            if let Some(tb) = &e.traceback {
                eprint!("{tb}");
            }
            Err(Failure::failed(format!(
                "scheduled task '{}' of '{}' failed: {}",
                task.name, task.plugin, e.message
            )))
        }
        TaskRunOutcome::Skipped(reason) => {
            println!("{}: skipped ({reason})", task.name);
            Ok(Exit::Success)
        }
        TaskRunOutcome::AlreadyRunning | TaskRunOutcome::Disabled => {
            unreachable!("a fresh host runs nothing yet")
        }
    }
}
