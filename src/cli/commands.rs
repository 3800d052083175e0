//! `plughost commands list` / `commands run`: the command table's CLI side.

use serde_json::{json, Value};

use super::exit::{Exit, Failure};
use super::{build_host, print_json, suggest, Cli};
use crate::runtime::Runtime;

/// `commands list`: `/help`'s text, or the CLI's listing as JSON.
pub(super) fn list(cli: &Cli, runtime: &Runtime, json: bool) -> Result<Exit, Failure> {
    let host = build_host(cli, runtime)?;
    if json {
        let registry = host.registry();
        let table = crate::core::commands::CommandTable::new(&registry);
        let list: Vec<Value> = table
                .listing(crate::core::commands::Surface::Cli)
                .into_iter()
                .map(|c| {
                    json!({"name": c.name, "description": c.description, "args_hint": c.args_hint, "plugin": c.plugin})
                })
                .collect();
        print_json(&list);
    } else {
        println!("{}", host.help_text());
    }
    Ok(Exit::Success)
}

/// `commands run LINE`, on the process's runtime.
pub(super) fn run(
    rt: &tokio::runtime::Runtime,
    cli: &Cli,
    runtime: &Runtime,
    line: &str,
) -> Result<Exit, Failure> {
    let host = build_host(cli, runtime)?;
    rt.block_on(crate::core::dispatch::fire_host_start(&host.registry()));
    match rt.block_on(host.run_command(line)) {
        Ok(Some(reply)) => {
            println!("{reply}");
            Ok(Exit::Success)
        }
        Ok(None) => Ok(Exit::Success),
        Err(crate::host::CommandError::Unknown(typed)) => {
            let registry = host.registry();
            let table = crate::core::commands::CommandTable::new(&registry);
            let names: Vec<String> = table
                .listing(crate::core::commands::Surface::Cli)
                .iter()
                .map(|c| format!("/{}", c.name))
                .collect();
            Err(Failure::failed(format!(
                "unknown command '/{typed}'{}; type /help to list the commands",
                suggest::did_you_mean(&format!("/{typed}"), names.iter().map(String::as_str))
            )))
        }
        Err(e) => Err(Failure::failed(e.to_string())),
    }
}
