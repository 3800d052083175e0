//! `plughost cron list` and `plughost cron run NAME`: the plugins'
//! scheduled tasks (Felix's `cron_tasks`), listed, or one run now — the
//! same run `plughost serve` makes on its timer.

use serde_json::json;

use super::exit::{Exit, Failure};
use super::{build_host, print_json, Cli};
use crate::core::schedule::TaskRunOutcome;
use crate::runtime::Runtime;

/// `cron list`.
pub(super) fn list(cli: &Cli, runtime: &Runtime, json: bool) -> Result<Exit, Failure> {
    let host = build_host(cli, runtime)?;
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
    runtime: &Runtime,
    name: &str,
) -> Result<Exit, Failure> {
    // A server running on this home runs it, beside its own timer: never
    // twice at once.
    let home = super::home_of(cli);
    if let Some(answer) = rt.block_on(crate::serve::watch::ask_cron(&home, name)) {
        return answered(name, &answer);
    }
    let host = build_host(cli, runtime)?;
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

/// `cron run NAME`'s answer from a running server (`POST /admin/cron/NAME`).
fn answered(name: &str, answer: &serde_json::Value) -> Result<Exit, Failure> {
    let field = |k: &str| answer[k].as_str().unwrap_or_default().to_string();
    match field("outcome").as_str() {
        "completed" => {
            println!("{name}: done (in the running server)");
            Ok(Exit::Success)
        }
        "skipped" => {
            println!("{name}: skipped ({})", field("reason"));
            Ok(Exit::Success)
        }
        "already_running" => Err(Failure::failed(format!(
            "scheduled task '{name}' is running in the server now; not started twice"
        ))),
        "disabled" => Err(Failure::failed(format!(
            "scheduled task '{name}' is disabled in the running server (it failed too often in a row)"
        ))),
        "failed" => {
            if let Some(tb) = answer["traceback"].as_str() {
                eprint!("{tb}");
            }
            Err(Failure::failed(format!(
                "scheduled task '{name}' of '{}' failed: {}",
                field("plugin"),
                field("error")
            )))
        }
        _ => Err(Failure::failed(format!(
            "no scheduled task '{name}' in the running server; its tasks are: {}",
            answer["known"]
        ))),
    }
}
