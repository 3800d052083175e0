//! `plughost tools list` / `tools call`.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};

use super::exit::{Exit, Failure};
use super::{first_line, home_of, host_builder, print_json, suggest, table, Cli};
use crate::host::Host;
use crate::runtime::Runtime;

/// `tools list`: every registered tool, the built-in ones included; one
/// that cannot be used right now (its `check_fn` says no, a variable it
/// requires is unset, no web provider serves it) is marked, with why.
pub(super) fn list(
    cli: &Cli,
    runtime: &Runtime,
    json: bool,
    workspace: Option<&PathBuf>,
) -> Result<Exit, Failure> {
    let host = build_host_with_builtins(cli, runtime, workspace)?;
    let registry = host.registry();
    let tools: Vec<_> = registry
        .tools()
        .into_iter()
        .map(|t| (&t.spec, unavailable(t)))
        .collect();
    if json {
        let listed: Vec<Value> = tools
            .iter()
            .map(|(spec, why)| {
                let mut v = serde_json::to_value(spec).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut v {
                    m.insert("available".into(), Value::Bool(why.is_none()));
                    if let Some(why) = why {
                        m.insert("unavailable".into(), Value::String(why.clone()));
                    }
                }
                v
            })
            .collect();
        print_json(&listed);
    } else if tools.is_empty() {
        println!("No tools registered.");
    } else {
        let rows = tools
            .iter()
            .map(|(t, why)| {
                let description = match why {
                    None => first_line(&t.description),
                    Some(why) => format!("(unavailable: {why}) {}", first_line(&t.description)),
                };
                vec![t.name.clone(), t.plugin.clone(), description]
            })
            .collect::<Vec<_>>();
        println!(
            "{}",
            table::render(&["TOOL", "PLUGIN", "DESCRIPTION"], &rows)
        );
    }
    Ok(Exit::Success)
}

/// Why `tool` cannot be used right now, in a few words; `None` when it can.
/// The same order of checks as a call's (`requires_env`, then the check).
fn unavailable(tool: &crate::core::registry::Tool) -> Option<String> {
    use crate::core::outcome::Unavailability;
    let unset = |v: &String| std::env::var_os(v).is_none_or(|x| x.is_empty());
    if let Some(variable) = tool.spec.requires_env.iter().find(|v| unset(v)) {
        return Some(format!("{variable} is not set"));
    }
    match tool.handler.check()? {
        Ok(true) => None,
        Ok(false) => Some(match tool.handler.unavailability() {
            Unavailability::CheckFn => "its check_fn returned False".into(),
            Unavailability::MissingEnv { variable } => format!("{variable} is not set"),
            Unavailability::Unmet { problem } => problem,
        }),
        Err(error) => Some(format!("its check_fn raised: {}", error.shown())),
    }
}

/// What `tools call` was asked to do.
pub(super) struct Call<'a> {
    pub name: &'a str,
    pub args: Option<&'a str>,
    pub session: &'a str,
    pub timeout: Option<std::time::Duration>,
    pub workspace: Option<&'a PathBuf>,
}

/// `tools call`: one call through the full pipeline, on the process's runtime.
pub(super) fn call(
    rt: &'static tokio::runtime::Runtime,
    cli: &Cli,
    runtime: &Runtime,
    call: Call<'_>,
) -> Result<Exit, Failure> {
    let Call {
        name,
        args,
        session,
        timeout,
        workspace,
    } = call;
    let args = parse_args(args)?;
    let host = build_host_with_builtins(cli, runtime, workspace)?;
    let known: Vec<String> = host
        .registry()
        .tools()
        .iter()
        .map(|t| t.spec.name.clone())
        .collect();
    rt.block_on(crate::core::dispatch::fire_host_start(&host.registry()));
    let result = match timeout {
        None => rt.block_on(host.call_tool(name, args, session)),
        Some(limit) => call_with_timeout(rt, host, name, args, session, limit),
    };
    println!("{}", result.text);
    if matches!(result.outcome, crate::core::outcome::ToolOutcome::NotFound) {
        eprintln!(
            "plughost: no tool named '{name}'{}; see: plughost tools list",
            suggest::did_you_mean(name, known.iter().map(String::as_str))
        );
    }
    Ok(Exit::ok_if(result.is_ok()))
}

/// `tools call --timeout`: the call runs on its own thread so the limit
/// holds even for a synchronous in-process handler (which is left behind:
/// the process exits when the command is done). An isolated plugin's
/// call is dropped at the limit, which stops its worker.
fn call_with_timeout(
    rt: &'static tokio::runtime::Runtime,
    host: Host,
    name: &str,
    args: Value,
    session: &str,
    limit: std::time::Duration,
) -> crate::core::dispatch::ToolResult {
    use crate::core::outcome::ToolOutcome;
    let host = Arc::new(host);
    let (tx, rx) = std::sync::mpsc::channel();
    let (calling, name_owned, session) = (host.clone(), name.to_string(), session.to_string());
    let spawned = std::thread::Builder::new()
        .name("plughost-tools-call".into())
        .spawn(move || {
            let call = calling.call_tool(&name_owned, args, &session);
            let result = rt.block_on(async { tokio::time::timeout(limit, call).await });
            let _ = tx.send(result.ok());
        });
    let timed_out = || crate::core::dispatch::ToolResult {
        text: host
            .registry()
            .renderer()
            .render(name, &ToolOutcome::TimedOut { after: limit }),
        outcome: ToolOutcome::TimedOut { after: limit },
    };
    if spawned.is_err() {
        return timed_out();
    }
    // A little past the limit: the call's own timeout answers first when
    // its thread is free to notice.
    match rx.recv_timeout(limit + std::time::Duration::from_millis(500)) {
        Ok(Some(result)) => result,
        Ok(None) | Err(_) => timed_out(),
    }
}

fn parse_args(args: Option<&str>) -> Result<Value, Failure> {
    let Some(text) = args else {
        return Ok(json!({}));
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Failure::usage(format!(
            "--args is not valid JSON (line {}, column {}): {e}; pass an object such as '{{\"city\": \"Oslo\"}}'",
            e.line(),
            e.column()
        ))
    })?;
    if !value.is_object() {
        return Err(Failure::usage(
            "--args must be a JSON object such as '{\"city\": \"Oslo\"}'",
        ));
    }
    Ok(value)
}

/// The host for `tools list` / `tools call`: the plugins plus the agent's
/// built-in tools, confined to `workspace` (default `<home>/workspace`),
/// so what the agent can call can also be listed and tried by hand.
fn build_host_with_builtins(
    cli: &Cli,
    runtime: &Runtime,
    workspace: Option<&PathBuf>,
) -> Result<Host, Failure> {
    use crate::agent::tools::{builtin_tools, ToolLimits, Workspace};
    let dir = workspace
        .cloned()
        .unwrap_or_else(|| home_of(cli).join("workspace"));
    let workspace = Workspace::new(&dir)
        .map_err(|e| Failure::failed(format!("cannot use the workspace {}: {e}", dir.display())))?;
    let mut builder = host_builder(cli, runtime);
    for tool in builtin_tools(&workspace, &ToolLimits::default()) {
        builder = builder.tool(tool);
    }
    Ok(builder.build()?)
}
