//! The `plughost` command line: the grammar in `args`, one module per
//! command family, the exit statuses in `exit`.
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
mod enable_check;
mod exit;
mod lock;
pub mod logging;
mod marketplace;
mod plugins;
mod serve;
mod sessions;
mod skills;
mod suggest;
mod table;
mod tools;
// --- issue 48: userConfig options asked for at install ---
mod user_config;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

pub use args::Cli;
use args::{Command, CommandsCmd, CronCmd, PluginsCmd, SkillsCmd, ToolsCmd};
use exit::{Exit, Failure};

use crate::host::Host;
use crate::plugins::config;
use crate::runtime::Runtime;

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
    let mut cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    // iso-parity (issue 47): `PLUGHOST_ISOLATE` is `--isolate` when the
    // flag is not given (what the test suite's isolated pass sets).
    if cli.isolate.is_none() {
        if let Ok(value) = std::env::var("PLUGHOST_ISOLATE") {
            match crate::plugins::config::Isolation::parse(&value) {
                Ok(isolation) => cli.isolate = Some(isolation),
                Err(problem) => {
                    eprintln!("plughost: PLUGHOST_ISOLATE: {problem}");
                    return 2;
                }
            }
        }
    }
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
fn build_host(cli: &Cli, runtime: &Runtime) -> Result<Host, Failure> {
    Ok(host_builder(cli, runtime).build()?)
}

/// [`build_host`] with plugin `key` enabled on top of config.json's lists
/// (`plugins enable`'s load check).
fn build_host_enabling(cli: &Cli, runtime: &Runtime, key: &str) -> Result<Host, Failure> {
    Ok(host_builder(cli, runtime).enable([key]).build()?)
}

/// What every listing/calling host starts from: the CLI's home, isolation
/// and Python log level, plus Flowly's web tools.
fn host_builder(cli: &Cli, runtime: &Runtime) -> crate::host::HostBuilder {
    // The CLI hosts Python plugins: the interpreter starts in-process even
    // when no plugin was found (where to look for installed ones is its
    // `sys.path`), which is cheaper than the child process a library host of
    // native parts reads that path from (measured: `plugins list` on a home
    // without plugins, 56 against 68 ms). It starts in the build, while a
    // helper thread reads the plugin directories.
    let mut builder = Host::builder()
        .runtime(runtime)
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

impl Command {
    /// Whether the command runs on the process's tokio runtime: not the
    /// commands that only read or write files (the runtime is built on
    /// first use, so they start no threads).
    fn needs_tokio(&self) -> bool {
        matches!(
            self,
            Command::Run { .. }
                | Command::Chat { .. }
                | Command::Mcp { .. }
                | Command::Serve { .. }
                | Command::Tools(ToolsCmd::Call { .. })
                | Command::Commands(CommandsCmd::Run { .. })
                | Command::Cron(CronCmd::Run { .. })
        )
    }
}

/// The CLI's runtime: Python `logging` forwarded at `python_level`, two
/// tokio worker threads (marked as plughost's) for the agent loop, the
/// servers and single calls.
fn runtime_settings(python_level: u8) -> crate::runtime::Settings {
    crate::runtime::Settings::default()
        .python_log_level(python_level)
        .worker_threads(2)
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialisable")
    );
}

/// Run the parsed command line on the process's runtime, started here
/// (once: every host of the command is built from it).
fn run(cli: Cli, python_level: u8) -> Result<Exit, Failure> {
    // An isolated plugin's worker process starts its own runtime, with its
    // parent's settings, and keeps its own Ctrl-C handling (src/isolation).
    if matches!(cli.command, Command::Worker) {
        crate::isolation::worker_main();
    }
    // Ctrl-C is plughost's (see runtime::signals).
    crate::runtime::signals::own_interrupt();
    if cli.command.stdout_is_machine_readable() {
        crate::runtime::plugin_stdout_to_stderr();
    }
    let runtime = &Runtime::start(runtime_settings(python_level))
        .map_err(|e| Failure::failed(e.to_string()))?;
    // The process's tokio runtime lives as long as the process: a command
    // ends without waiting on what a plugin left behind (a sync tool or
    // hook that timed out keeps its blocking thread, and Python cannot be
    // stopped from outside).
    let tokio = cli.command.needs_tokio().then(|| runtime.tokio());
    // The command loads its plugins before entering its runtime; an
    // isolated plugin's replies are read on that runtime all the same.
    // (Dropped when the command ends: a later worker of this process, the
    // wheel's, gets a thread of its own again.)
    let _replies = tokio.map(|t| crate::isolation::read_replies_on(t.handle().clone()));
    let rt = || tokio.expect("the command runs on the tokio runtime");
    let (home, isolate) = (cli.home.as_ref(), cli.isolate.as_ref());
    match &cli.command {
        Command::Run {
            message,
            json,
            agent: args,
        } => {
            let agent = agent::build_agent(home, isolate, runtime, &args.settings)?;
            agent::run(rt(), agent, args, message, *json)
        }
        Command::Chat { agent: args } => {
            let agent = agent::build_agent(home, isolate, runtime, &args.settings)?;
            agent::chat(rt(), agent, args)
        }
        Command::Worker => unreachable!("a worker was served above"),
        Command::Mcp { args } => serve::mcp(rt(), &cli, runtime, args),
        Command::Serve { args } => serve::serve(rt(), &cli, runtime, args),
        Command::Plugins(command) => plugins_command(&cli, runtime, command),
        Command::Tools(ToolsCmd::List { json, workspace }) => {
            tools::list(&cli, runtime, *json, workspace.as_ref())
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
            tools::call(rt(), &cli, runtime, call)
        }
        Command::Commands(CommandsCmd::List { json }) => commands::list(&cli, runtime, *json),
        Command::Commands(CommandsCmd::Run { line }) => commands::run(rt(), &cli, runtime, line),
        Command::Skills(SkillsCmd::List { json }) => skills::list(&cli, runtime, *json),
        Command::Skills(SkillsCmd::View { name }) => skills::view(&cli, runtime, name),
        Command::Hermes { name, args } => skills::hermes(&cli, runtime, name.as_ref(), args),
        Command::Cron(CronCmd::List { json }) => cron::list(&cli, runtime, *json),
        Command::Cron(CronCmd::Run { name }) => cron::run(rt(), &cli, runtime, name),
        Command::Sessions(command) => sessions::run(&cli, command),
    }
}

/// `plughost plugins …`.
fn plugins_command(cli: &Cli, runtime: &Runtime, command: &PluginsCmd) -> Result<Exit, Failure> {
    match command {
        // --- changed by rl5: --reload ---
        PluginsCmd::Enable {
            name,
            force,
            reload,
        } => {
            if enable_check::is_child() {
                return enable_check::run_child(cli, runtime, name);
            }
            enable_check::enable(cli, runtime, name, *force)
                .and_then(|exit| plugins::then_reload(cli, exit, *reload))
        }
        PluginsCmd::Disable { name } => plugins::set_enabled(cli, name, false, true),
        PluginsCmd::Forget { names, stray } => plugins::forget(&home_of(cli), names, *stray),
        PluginsCmd::Install { .. } => plugins::install_command(cli, runtime, command),
        PluginsCmd::Accept { name } => lock::accept(&home_of(cli), name),
        PluginsCmd::Remove { name, yes } => plugins::remove(&home_of(cli), name, *yes),
        PluginsCmd::Doctor { json } => {
            // The checks run in a child a crash cannot take the report with.
            if let Some(code) = crate::host::doctor::child::checked_in_child(&home_of(cli)) {
                return Ok(Exit::Plugin(code));
            }
            let host = build_host(cli, runtime)?;
            plugins::doctor(&host, *json)
        }
        PluginsCmd::List { json } => plugins::list(cli, runtime, *json),
        PluginsCmd::Deps(args::DepsCmd::Sync) => deps::sync(&home_of(cli)),
        PluginsCmd::Marketplace(command) => marketplace::run(&home_of(cli), command),
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
