//! `plughost run` and `plughost chat`: the agent loop on the command line.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio::io::AsyncBufReadExt;

use super::exit::{Exit, Failure};
use crate::agent::provider::{self, ProviderOptions};
use crate::agent::tools::{self, DelegateSlot, Workspace};
use crate::agent::{Agent, AgentConfig, AgentEvent, Inbound, TurnReport};
use crate::host::Host;
use crate::runtime::Runtime;

/// How the agent is built: the model, its limits and the workspace
/// (shared by `run`, `chat` and `serve`).
#[derive(Args, Debug, Clone)]
pub struct AgentSettings {
    /// PROVIDER:MODEL — openai:MODEL, or scripted[:SCRIPT] (the default: the shipped demo script).
    #[arg(long, default_value = "scripted:demo")]
    pub model: String,
    /// Script file for the scripted provider (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Base URL of the model's API: for openai:MODEL (else OPENAI_BASE_URL), or
    /// instead of a plugin model provider's own (else its base-URL variable)
    #[arg(long)]
    pub base_url: Option<String>,
    /// Directory the file tools are confined to (default <home>/workspace).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Model iterations per turn before giving up (1 to 10000).
    #[arg(long, value_name = "N", default_value = "25", allow_negative_numbers = true, value_parser = iterations)]
    pub max_iterations: usize,
    /// Seconds a tool call may take.
    #[arg(long, value_name = "SECS", default_value = "120", allow_negative_numbers = true, value_parser = seconds)]
    pub tool_timeout: Duration,
    /// Seconds an async hook may take before it is skipped (default 30, or
    /// plugins.hook_callback_timeout of Hermes's config.yaml).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = seconds)]
    pub hook_timeout: Option<Duration>,
    /// Seconds the model API may stay silent (before answering, or between
    /// two chunks of a streamed answer) before the call fails.
    #[arg(long, value_name = "SECS", default_value = "300", allow_negative_numbers = true, value_parser = seconds)]
    pub model_timeout: Duration,
}

/// `run` and `chat` options: the agent's settings and the session.
#[derive(Args, Debug, Clone)]
pub struct AgentArgs {
    #[command(flatten)]
    pub settings: AgentSettings,
    /// Session key (transcripts live in <home>/sessions/).
    #[arg(long, default_value = "default")]
    pub session: String,
}

/// The most `--max-iterations` accepted: far past any useful turn.
const MAX_ITERATIONS: usize = 10_000;

/// `--max-iterations`: a whole number from 1 to [`MAX_ITERATIONS`].
pub(super) fn iterations(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_ITERATIONS).contains(n))
        .ok_or_else(|| format!("must be a whole number from 1 to {MAX_ITERATIONS}"))
}

/// A flag given in seconds; clap names the flag and the value in its error
/// and exits 2.
pub(super) fn seconds(value: &str) -> Result<Duration, String> {
    let number: f64 = value
        .trim()
        .parse()
        .map_err(|_| "not a number of seconds".to_string())?;
    provider::timeout_secs(number)
}

/// Build the host with the built-in tools, and the agent over it.
pub(super) fn build_agent(
    home: Option<&PathBuf>,
    isolation: Option<&crate::plugins::config::Isolation>,
    runtime: &Runtime,
    args: &AgentSettings,
) -> Result<Agent, Failure> {
    build_agent_with(home, (isolation, true), runtime, args, |p| p)
}

/// [`build_agent`], with the model provider passed through `wrap` first;
/// `isolation.1`: third-party plugins run isolated unless told otherwise
/// (the long-running hosts' default, see docs/reliability.md).
pub(super) fn build_agent_with(
    home: Option<&PathBuf>,
    isolation: (Option<&crate::plugins::config::Isolation>, bool),
    runtime: &Runtime,
    args: &AgentSettings,
    wrap: impl FnOnce(Arc<dyn provider::Provider>) -> Arc<dyn provider::Provider>,
) -> Result<Agent, Failure> {
    let home_dir = crate::plugins::config::resolve_home(home.map(|p| p.as_path()));
    let workspace_dir = args
        .workspace
        .clone()
        .unwrap_or_else(|| home_dir.join("workspace"));
    let workspace = Workspace::new(&workspace_dir).map_err(|e| {
        Failure::failed(format!(
            "cannot use the workspace {}: {e}",
            workspace_dir.display()
        ))
    })?;
    let slot = DelegateSlot::default();
    let mut builder = Host::builder()
        .home(&home_dir)
        .runtime(runtime)
        .isolate_third_party(isolation.1);
    // --- changed by h5 --- (Hermes's plugins.hook_callback_timeout when the flag is not given)
    if let Some(budget) = crate::plugins::config::hermes_yaml::hook_timeout(args.hook_timeout) {
        builder = builder.hook_timeout(budget);
    }
    if let Some(isolation) = isolation.0 {
        builder = builder.isolate(isolation.clone());
    }
    for tool in tools::agent_tools(&workspace, &home_dir, &slot) {
        builder = builder.tool(tool);
    }
    let host = builder.build()?;
    let options = ProviderOptions {
        base_url: args.base_url.clone(),
        script: args.script.clone(),
        model_timeout: Some(args.model_timeout),
        home: Some(home_dir.clone()),
        profiles: host.extensions().peek(),
    };
    let provider = wrap(
        provider::from_spec(&args.model, &options).map_err(|e| Failure::usage(e.to_string()))?,
    );
    let config = AgentConfig {
        max_iterations: args.max_iterations,
        tool_timeout: args.tool_timeout,
        ..AgentConfig::default()
    };
    Ok(Agent::new(Arc::new(host), provider, config, Some(&slot)))
}

/// `plughost run MESSAGE`: one turn. Tool calls and their outcomes are
/// shown on stderr as they happen (as in chat); the reply goes to stdout,
/// a failed turn's error to stderr. `--json` prints only the report.
/// Ctrl-C during the turn cancels it as in chat (exit 130).
pub(super) fn run(
    rt: &tokio::runtime::Runtime,
    agent: Agent,
    args: &AgentArgs,
    message: &str,
    json: bool,
) -> Result<Exit, Failure> {
    let report = rt.block_on(async {
        let (events, display) = if json {
            (None, None)
        } else {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (
                Some(tx),
                Some(show_events(rx, Box::new(std::io::stderr()), false)),
            )
        };
        agent.start().await;
        // Ctrl-C cancels the turn as in chat: the report says so, exit 130.
        let mut sigint = interrupts();
        let cancel = interrupted(&mut sigint);
        let report = agent
            .send_cancellable(Inbound::new(&args.session, message), events, cancel)
            .await;
        if let Some(display) = display {
            let _ = display.await;
        }
        agent.shutdown().await;
        report
    });
    if json {
        super::print_json(&report);
    } else if report.interrupted {
        eprintln!("plughost: interrupted (Ctrl-C); the turn was cancelled");
    } else if let Some(error) = &report.error {
        eprintln!("plughost: {error}");
    } else if let Some(reply) = &report.reply {
        println!("{reply}");
    } else if let Some(reason) = &report.skipped {
        eprintln!("(message dropped by a plugin: {reason})");
    }
    Ok(if report.interrupted {
        Exit::Interrupted
    } else {
        Exit::ok_if(report.completed)
    })
}

/// Show a turn's events on `out` as they arrive: tool calls and outcomes
/// always, the reply's text as it streams when `text`.
fn show_events(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<AgentEvent>,
    mut out: Box<dyn Write + Send>,
    text: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut mid_line = false;
        while let Some(event) = rx.recv().await {
            match event {
                // The CLI prints the iterations' text as one stream.
                AgentEvent::IterationStart => {}
                AgentEvent::TextDelta(delta) => {
                    if !text {
                        continue;
                    }
                    let _ = write!(out, "{delta}");
                    mid_line = !delta.ends_with('\n');
                }
                AgentEvent::ToolStarted {
                    name, arguments, ..
                } => {
                    if mid_line {
                        let _ = writeln!(out);
                        mid_line = false;
                    }
                    let args: String = arguments.chars().take(120).collect();
                    let _ = writeln!(out, "  ⚙ {name} {args}");
                }
                AgentEvent::ToolFinished {
                    name,
                    result,
                    outcome,
                    ..
                } => {
                    let first = result.lines().next().unwrap_or_default();
                    let first: String = first.chars().take(120).collect();
                    let mark = if outcome == crate::core::dispatch::ToolOutcome::Ok {
                        "✓"
                    } else {
                        "✗"
                    };
                    let _ = writeln!(out, "  {mark} {name} → {first}");
                }
            }
            let _ = out.flush();
        }
        if mid_line {
            let _ = writeln!(out);
        }
    })
}

/// Ctrl-C (SIGINT) as a stream, listened to from now on: one pressed
/// before a turn's futures are first polled (while its first tool starts)
/// is not left to the default action, which would end the process. `None`
/// (warned) when the signal cannot be listened to: Ctrl-C then ends
/// plughost at once.
fn interrupts() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!("cannot listen for Ctrl-C ({e}); it ends plughost at once");
            None
        }
    }
}

/// The next Ctrl-C from [`interrupts`] (never, without a stream).
async fn interrupted(sigint: &mut Option<tokio::signal::unix::Signal>) {
    match sigint {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The model as the banner names it: `--script FILE` replaces the demo
/// script, so `scripted:FILE` rather than the default `scripted:demo`.
fn model_shown(args: &AgentSettings) -> String {
    match &args.script {
        Some(file) if args.model.starts_with("scripted") => {
            format!("scripted:{}", file.display())
        }
        _ => args.model.clone(),
    }
}

/// `plughost chat`: an interactive loop; Ctrl-C cancels a running turn,
/// Ctrl-D (or Ctrl-C at the prompt) ends the chat.
pub(super) fn chat(
    rt: &tokio::runtime::Runtime,
    agent: Agent,
    args: &AgentArgs,
) -> Result<Exit, Failure> {
    rt.block_on(async {
        agent.start().await;
        println!(
            "plughost chat — model {}, session '{}'. /help lists commands; Ctrl-D quits.",
            model_shown(&args.settings),
            args.session
        );
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut sigint = interrupts();
        loop {
            print!("you> ");
            let _ = std::io::stdout().flush();
            let line = tokio::select! {
                line = lines.next_line() => line,
                _ = interrupted(&mut sigint) => Ok(None),
            };
            let Ok(Some(line)) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let display = show_events(rx, Box::new(std::io::stdout()), true);
            let cancel = interrupted(&mut sigint);
            let report: TurnReport = agent
                .send_cancellable(Inbound::new(&args.session, &line), Some(tx), cancel)
                .await;
            let _ = display.await;
            let streamed = !report.command && report.error.is_none() && !report.interrupted;
            match (&report.reply, streamed) {
                (Some(reply), false) => println!("{reply}"),
                (Some(reply), true)
                    if report.ended_by == crate::core::hooks::EndedBy::IterationCap =>
                {
                    println!("{reply}")
                }
                _ => {}
            }
            if let Some(reason) = &report.skipped {
                println!("(message dropped by a plugin: {reason})");
            }
        }
        println!();
        agent.shutdown().await;
    });
    Ok(Exit::Success)
}
