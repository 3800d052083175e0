//! The `plughost` command line: the grammar in [`args`], one module per
//! command family, the exit statuses in [`exit`].
//!
//! Exit codes: 0 success; 1 a failed operation (a tool call whose result is
//! an error or a block, an unknown command or skill, a broken config);
//! 2 bad command-line input (clap's own errors, malformed `--args`);
//! 130 a `run` stopped by Ctrl-C.

mod agent;
mod args;
mod commands;
mod cron;
mod deps;
mod exit;
mod lock;
pub mod logging;
mod plugins;
mod serve;
mod sessions;
mod skills;
mod suggest;
mod table;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

pub use args::Cli;
use args::{Command, CommandsCmd, CronCmd, PluginsCmd, SkillsCmd, ToolsCmd};
use exit::{Exit, Failure};

use crate::host::Host;
use crate::plugins::config;

pub(crate) const RESTART: &str = "Restart plughost for changes to apply.";

/// Parse the process arguments and run.
pub fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes
    // away (`plughost plugins list | head`) instead of panicking on EPIPE.
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any other thread exists,
    // restoring the default disposition of one signal; no handler runs Rust.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    ENDS_WITH_COMMAND.store(true, std::sync::atomic::Ordering::Relaxed);
    ExitCode::from(run_args(std::env::args_os()))
}

/// Set by the `plughost` binary's [`main`]: the process ends when its
/// command returns (not so for the wheel's console script, which runs a
/// command inside the user's interpreter).
static ENDS_WITH_COMMAND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the process ends when the command returns (see [`main`]).
pub(crate) fn process_ends_with_command() -> bool {
    ENDS_WITH_COMMAND.load(std::sync::atomic::Ordering::Relaxed)
}

/// Run the command line with `args` (program name first); the exit code.
/// The wheel's `plughost` console script calls this inside the user's
/// interpreter.
pub fn run_args<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let python_level = crate::cli::logging::init(cli.verbose);
    match run(cli, python_level) {
        Ok(exit) => exit.code(),
        Err(f) => {
            eprintln!("plughost: {}", f.message);
            f.code.code()
        }
    }
}

/// The host for the commands that list or call plugins. Missing bundled
/// plugins do not stop them (they are listed as failed, with an error
/// naming them); the agent loop builds its own host, which refuses.
fn build_host(cli: &Cli, python_level: u8) -> Result<Host, Failure> {
    Ok(host_builder(cli, python_level).build()?)
}

/// What every listing/calling host starts from: the CLI's home, isolation
/// and Python log level, plus Flowly's web tools.
fn host_builder(cli: &Cli, python_level: u8) -> crate::host::HostBuilder {
    // The CLI hosts Python plugins: the interpreter starts in-process even
    // when no plugin was found (where to look for installed ones is its
    // `sys.path`), which is cheaper than the child process a library host of
    // native parts reads that path from (measured: `plugins list` on a home
    // without plugins, 56 against 68 ms). It starts in the build, while a
    // helper thread reads the plugin directories.
    let mut builder = Host::builder()
        .python_log_level(python_level)
        .allow_missing_bundled()
        .start_python_anyway();
    if let Some(home) = &cli.home {
        builder = builder.home(home);
    }
    if let Some(isolation) = &cli.isolate {
        builder = builder.isolate(isolation.clone());
    }
    // Flowly's web_search / web_extract, served by the web backend plugins.
    let home = crate::plugins::config::resolve_home(cli.home.as_deref());
    for tool in crate::agent::tools::web_tools(&home) {
        builder = builder.tool(tool);
    }
    builder
}

/// The tokio runtime a command runs on: none for the commands that only
/// read or write files, one thread for a single tool call or slash command,
/// worker threads (marked as plughost's) for the agent loop and the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    None,
    CurrentThread,
    MultiThread,
}

impl Command {
    fn flavour(&self) -> Flavour {
        match self {
            Command::Run { .. }
            | Command::Chat { .. }
            | Command::Mcp { .. }
            | Command::Serve { .. } => Flavour::MultiThread,
            Command::Tools(ToolsCmd::Call { .. })
            | Command::Commands(CommandsCmd::Run { .. })
            | Command::Cron(CronCmd::Run { .. }) => Flavour::CurrentThread,
            _ => Flavour::None,
        }
    }
}

/// The process's one tokio runtime, built once before the command runs and
/// passed down to it (an isolated plugin's worker builds its own, in its
/// own process).
fn tokio_runtime(flavour: Flavour) -> Option<Arc<tokio::runtime::Runtime>> {
    let built = match flavour {
        Flavour::None => return None,
        Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavour::MultiThread => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .on_thread_start(crate::runtime::thread_started)
            .enable_all()
            .build(),
    };
    Some(Arc::new(built.expect("a tokio runtime")))
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialisable")
    );
}

/// Run the parsed command line on the process's one tokio runtime.
fn run(cli: Cli, python_level: u8) -> Result<Exit, Failure> {
    // Ctrl-C is plughost's (see runtime::signals); an isolated plugin's
    // worker process keeps its own handling (src/isolation decides).
    if !matches!(cli.command, Command::Worker) {
        crate::runtime::signals::own_interrupt();
    }
    if cli.command.stdout_is_machine_readable() {
        crate::runtime::plugin_stdout_to_stderr();
    }
    // --- changed by rely: the end waits for no stuck plugin thread ---
    let rt = exit::BoundedRuntime(tokio_runtime(cli.command.flavour()));
    // The command loads its plugins before entering its runtime; an
    // isolated plugin's replies are read on that runtime all the same.
    // (Dropped before the runtime: a later worker of this process, the
    // wheel's, gets a thread of its own again.)
    let _replies = rt
        .as_ref()
        .map(|runtime| crate::isolation::read_replies_on(runtime.handle().clone()));
    let rt = || rt.as_ref().expect("the command's flavour builds a runtime");
    let (home, isolate) = (cli.home.as_ref(), cli.isolate.as_ref());
    match &cli.command {
        Command::Run {
            message,
            json,
            agent: args,
        } => {
            let agent = agent::build_agent(home, isolate, python_level, &args.settings)?;
            agent::run(rt(), agent, args, message, *json)
        }
        Command::Chat { agent: args } => {
            let agent = agent::build_agent(home, isolate, python_level, &args.settings)?;
            agent::chat(rt(), agent, args)
        }
        Command::Worker => crate::isolation::worker_main(),
        Command::Mcp { args } => serve::mcp(rt(), &cli, python_level, args),
        Command::Serve { args } => serve::serve(rt(), &cli, python_level, args),
        Command::Plugins(command) => plugins_command(&cli, python_level, command),
        Command::Tools(ToolsCmd::List { json, workspace }) => {
            tools::list(&cli, python_level, *json, workspace.as_ref())
        }
        Command::Tools(ToolsCmd::Call {
            name,
            args,
            session,
            timeout,
            workspace,
        }) => {
            let call = tools::Call {
                name,
                args: args.as_deref(),
                session,
                timeout: *timeout,
                workspace: workspace.as_ref(),
            };
            tools::call(rt(), &cli, python_level, call)
        }
        Command::Commands(CommandsCmd::List { json }) => commands::list(&cli, python_level, *json),
        Command::Commands(CommandsCmd::Run { line }) => {
            commands::run(rt(), &cli, python_level, line)
        }
        Command::Skills(SkillsCmd::List { json }) => skills::list(&cli, python_level, *json),
        Command::Skills(SkillsCmd::View { name }) => skills::view(&cli, python_level, name),
        Command::Hermes { name, args } => skills::hermes(&cli, python_level, name.as_ref(), args),
        Command::Cron(CronCmd::List { json }) => cron::list(&cli, python_level, *json),
        Command::Cron(CronCmd::Run { name }) => cron::run(rt(), &cli, python_level, name),
        Command::Sessions(command) => sessions::run(&cli, command),
    }
}

/// `plughost plugins …`.
fn plugins_command(cli: &Cli, python_level: u8, command: &PluginsCmd) -> Result<Exit, Failure> {
    match command {
        // --- changed by rl5: --reload ---
        PluginsCmd::Enable {
            name,
            force,
            reload,
        } => plugins::set_enabled(cli, name, true, *force)
            .and_then(|exit| plugins::then_reload(cli, exit, *reload)),
        PluginsCmd::Disable { name } => plugins::set_enabled(cli, name, false, true),
        PluginsCmd::Forget { names, stray } => plugins::forget(&home_of(cli), names, *stray),
        PluginsCmd::Install { .. } => plugins::install_command(cli, python_level, command),
        PluginsCmd::Accept { name } => lock::accept(&home_of(cli), name),
        PluginsCmd::Remove { name, yes } => plugins::remove(&home_of(cli), name, *yes),
        PluginsCmd::Doctor { json } => {
            // The checks run in a child a crash cannot take the report with.
            if let Some(code) = crate::host::doctor::child::checked_in_child(&home_of(cli)) {
                return Ok(Exit::Plugin(code));
            }
            let host = build_host(cli, python_level)?;
            plugins::doctor(&host, *json)
        }
        PluginsCmd::List { json } => plugins::list(cli, python_level, *json),
        PluginsCmd::Deps(args::DepsCmd::Sync) => deps::sync(&home_of(cli)),
    }
}

fn home_of(cli: &Cli) -> PathBuf {
    config::resolve_home(cli.home.as_deref())
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

impl Command {
    /// Whether the command's stdout is for a program (`--json`, MCP over
    /// stdio): a plugin's `print()` then goes to stderr (issue 21 item 5).
    fn stdout_is_machine_readable(&self) -> bool {
        match self {
            Command::Run { json, .. }
            | Command::Tools(ToolsCmd::List { json, .. })
            | Command::Commands(CommandsCmd::List { json })
            | Command::Skills(SkillsCmd::List { json }) => *json,
            Command::Plugins(PluginsCmd::List { json } | PluginsCmd::Doctor { json }) => *json,
            Command::Mcp { .. } => true,
            _ => false,
        }
    }
}
