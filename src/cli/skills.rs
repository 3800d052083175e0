//! `plughost skills list` / `skills view`, and `plughost hermes`.

use super::exit::{Exit, Failure};
use super::{build_host, first_line, print_json, suggest, table, Cli};
use crate::host::Host;
use crate::runtime::Runtime;

/// `skills list`.
pub(super) fn list(cli: &Cli, runtime: &Runtime, json: bool) -> Result<Exit, Failure> {
    let host = build_host(cli, runtime)?;
    let registry = host.registry();
    let skills = registry.skills();
    if json {
        print_json(&skills);
    } else if skills.is_empty() {
        println!("No plugin skills registered.");
    } else {
        let rows = skills
            .iter()
            .map(|s| vec![s.name.clone(), first_line(&s.description)])
            .collect::<Vec<_>>();
        println!("{}", table::render(&["SKILL", "DESCRIPTION"], &rows));
    }
    Ok(Exit::Success)
}

/// `skills view NAME`: the skill's SKILL.md.
pub(super) fn view(cli: &Cli, runtime: &Runtime, name: &str) -> Result<Exit, Failure> {
    let host = build_host(cli, runtime)?;
    let text = host
        .skill(name)
        .map_err(|e| skill_failure(&host, name, e))?;
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    Ok(Exit::Success)
}

/// `hermes [NAME ARGS…]`: run (or list) a Hermes plugin's terminal command.
pub(super) fn hermes(
    cli: &Cli,
    runtime: &Runtime,
    name: Option<&String>,
    args: &[String],
) -> Result<Exit, Failure> {
    let host = build_host(cli, runtime)?;
    let hermes = crate::dialects::by_name("hermes")
        .ok_or_else(|| Failure::failed("this build has no Hermes dialect".to_string()))?;
    let terminal = hermes.abilities().terminal;
    match name {
        None => {
            let commands = terminal.map_or_else(Vec::new, |t| t.commands(host.extensions()));
            if commands.is_empty() {
                println!("No Hermes plugin registers a CLI command.");
            }
            for (name, help, plugin) in commands {
                println!("{name}  {help}  ({plugin})");
            }
            Ok(Exit::Success)
        }
        Some(name) => match terminal.map(|t| t.run(host.extensions(), name, args)) {
            None => Err(Failure::failed(
                "the Hermes dialect has no terminal commands".to_string(),
            )),
            Some(Ok(code)) => Ok(Exit::Plugin(code)),
            Some(Err(e @ crate::dialects::TerminalError::Unknown(_))) => {
                Err(Failure::usage(e.to_string()))
            }
            Some(Err(e)) => Err(Failure::failed(e.to_string())),
        },
    }
}

/// `skills view` of a name the registry lacks: say why when its plugin is
/// known (failed to load, not enabled), else suggest close names.
fn skill_failure(host: &Host, name: &str, error: crate::host::SkillError) -> Failure {
    if !matches!(error, crate::host::SkillError::Unknown(_)) {
        return Failure::failed(error.to_string());
    }
    let plugin = name.split_once(':').map(|(p, _)| p).unwrap_or(name);
    if let Some(record) = host.plugins().iter().find(|p| p.key == plugin && !p.loaded) {
        let why = record.error.as_deref().unwrap_or("it is not loaded");
        let at = record
            .failure
            .as_ref()
            .and_then(|f| f.location.as_deref())
            .map(|l| format!(" (at {l})"))
            .unwrap_or_default();
        return Failure::failed(if record.enabled {
            format!(
                "skill '{name}' is unavailable: its plugin '{plugin}' failed to load: {why}{at}; see: plughost plugins doctor"
            )
        } else {
            format!("skill '{name}' is unavailable: its plugin '{plugin}' is not loaded: {why}")
        });
    }
    let registry = host.registry();
    let skills = registry.skills();
    let hint = suggest::did_you_mean(name, skills.iter().map(|s| s.name.as_str()));
    Failure::failed(format!("{error}{hint}"))
}
