//! The `plughost` command line.
//!
//! Exit codes: 0 success; 1 a failed operation (a tool call whose result is
//! an error or a block, an unknown command or skill, a broken config);
//! 2 bad command-line input (clap's own errors, malformed `--args`).

mod agent;
pub mod logging;
mod plugins;
mod serve;
mod suggest;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use crate::host::{Host, HostError};
use crate::plugins::config;

pub(crate) const RESTART: &str = "Restart plughost for changes to apply.";

#[derive(Parser, Debug)]
#[command(
    name = "plughost",
    version,
    about = "Run Python agent plugins inside a fast Rust agent loop"
)]
pub struct Cli {
    /// More log output (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// The plughost home (overrides PLUGHOST_HOME; default ~/.plughost).
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Run these plugins each in its own worker process, so a crash or a
    /// spin in one cannot take plughost down: all, none, or KEY[,KEY…]
    /// (overrides plugins.isolate of config.json).
    #[arg(long, global = true, value_name = "WHICH", value_parser = isolation)]
    isolate: Option<config::Isolation>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Discover, enable and disable plugins.
    #[command(subcommand)]
    Plugins(PluginsCmd),
    /// List and call tools.
    #[command(subcommand)]
    Tools(ToolsCmd),
    /// List and run slash commands.
    #[command(subcommand)]
    Commands(CommandsCmd),
    /// List and read plugin skills.
    #[command(subcommand)]
    Skills(SkillsCmd),
    /// One agent turn: send MESSAGE, print the reply.
    Run {
        message: String,
        /// Print the whole turn (messages, tool calls, results, timings) as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        agent: agent::AgentArgs,
    },
    /// Chat with the agent interactively.
    Chat {
        #[command(flatten)]
        agent: agent::AgentArgs,
    },
    /// Run a terminal command a Hermes plugin registered (register_cli_command);
    /// without NAME, list them.
    Hermes {
        name: Option<String>,
        /// The command's own arguments (parsed by its argparse parser).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Serve the plugins' tools, skills and slash commands over MCP on stdin/stdout.
    Mcp {
        #[command(flatten)]
        args: serve::McpArgs,
    },
    /// Serve MCP at /mcp and the agent loop as an OpenAI-compatible API over HTTP.
    Serve {
        #[command(flatten)]
        args: serve::ServeArgs,
    },
    /// Serve one isolated plugin on stdin/stdout (started by plughost itself).
    #[command(name = "__worker", hide = true)]
    Worker,
}

/// `--isolate`: all, none, or plugin keys separated by commas.
fn isolation(value: &str) -> Result<config::Isolation, String> {
    config::Isolation::parse(value)
}

#[derive(Subcommand, Debug)]
enum PluginsCmd {
    /// Every discovered plugin and its load status.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Add a plugin to plugins.enabled (and take it out of plugins.disabled).
    Enable {
        name: String,
        /// Record the name even though no such plugin is installed (yet).
        #[arg(long)]
        force: bool,
    },
    /// Add a plugin to plugins.disabled (and take it out of plugins.enabled).
    Disable { name: String },
    /// Install a plugin from a git URL, owner/repo[/sub/path], URL#sub/path, or a local directory.
    Install {
        source: String,
        /// Add it to plugins.enabled.
        #[arg(long, overrides_with = "no_enable")]
        enable: bool,
        /// Do not enable it (the default).
        #[arg(long)]
        no_enable: bool,
        /// Replace an installed plugin of the same name.
        #[arg(long)]
        force: bool,
        /// The plugin API it is written for (flowly, hermes); recorded as
        /// plugins.dialects.<name> in config.json.
        #[arg(long, value_name = "NAME")]
        dialect: Option<String>,
    },
    /// Take names out of plugins.enabled and plugins.disabled of config.json
    /// (the plugins' files are not touched): stray entries, typos.
    Forget {
        /// The names to take out.
        names: Vec<String>,
        /// Also every entry that names no installed plugin.
        #[arg(long)]
        stray: bool,
    },
    /// Delete a user plugin and take it out of config.json.
    Remove {
        name: String,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long = "yes")]
        yes: bool,
    },
    /// Check every plugin: load status, registrations, environment, collisions, interpreter.
    Doctor {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ToolsCmd {
    /// Every registered tool, the built-in ones (plugin `builtin`) included.
    List {
        #[arg(long)]
        json: bool,
        /// Directory the built-in file tools and exec are confined to (default <home>/workspace).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Call a tool through the full pipeline (hooks included) and print its result.
    Call {
        name: String,
        /// Arguments as a JSON object.
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// Session id passed to hooks.
        #[arg(long, default_value = "")]
        session: String,
        /// Give up on the call after SECS seconds (an isolated plugin's
        /// worker is stopped; an in-process call is left behind and
        /// plughost exits anyway).
        #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = agent::seconds)]
        timeout: Option<std::time::Duration>,
        /// Directory the built-in file tools and exec are confined to (default <home>/workspace).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum CommandsCmd {
    /// Every slash command.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run a slash command line, e.g. "/ping hello".
    Run { line: String },
}

#[derive(Subcommand, Debug)]
enum SkillsCmd {
    /// Every plugin skill (plugin:name).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Print a skill's SKILL.md.
    View { name: String },
}

/// Failures the CLI reports on stderr with an exit code.
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
    pub(crate) fn failed(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Failure {
        Failure::failed(e.to_string())
    }
}

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Failure {
        Failure::failed(e.to_string())
    }
}

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
    ExitCode::from(run_args(std::env::args_os()))
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
        Ok(code) => code,
        Err(f) => {
            eprintln!("plughost: {}", f.message);
            f.code
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
    let mut builder = Host::builder()
        .python_log_level(python_level)
        .allow_missing_bundled();
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialisable")
    );
}

fn run(cli: Cli, python_level: u8) -> Result<u8, Failure> {
    // Ctrl-C is plughost's (see runtime::signals); an isolated plugin's
    // worker process keeps its own handling (src/isolation decides).
    if !matches!(cli.command, Command::Worker) {
        crate::runtime::signals::own_interrupt();
    }
    match &cli.command {
        Command::Run {
            message,
            json,
            agent: args,
        } => {
            let agent = agent::build_agent(
                cli.home.as_ref(),
                cli.isolate.as_ref(),
                python_level,
                &args.settings,
            )?;
            agent::run(agent, args, message, *json)
        }
        Command::Chat { agent: args } => {
            let agent = agent::build_agent(
                cli.home.as_ref(),
                cli.isolate.as_ref(),
                python_level,
                &args.settings,
            )?;
            agent::chat(agent, args)
        }
        Command::Worker => crate::isolation::worker_main(),
        Command::Mcp { args } => serve::mcp(&cli, python_level, args),
        Command::Serve { args } => serve::serve(&cli, python_level, args),
        Command::Plugins(PluginsCmd::Enable { name, force }) => {
            set_enabled(&cli, name, true, *force)
        }
        Command::Plugins(PluginsCmd::Disable { name }) => set_enabled(&cli, name, false, true),
        Command::Plugins(PluginsCmd::Forget { names, stray }) => {
            plugins::forget(&home_of(&cli), names, *stray)
        }
        Command::Plugins(PluginsCmd::Install {
            source,
            enable,
            force,
            dialect,
            ..
        }) => plugins::install(
            &home_of(&cli),
            source,
            *enable,
            *force,
            dialect.as_deref(),
            || build_host(&cli, python_level),
        ),
        Command::Plugins(PluginsCmd::Remove { name, yes }) => {
            plugins::remove(&home_of(&cli), name, *yes)
        }
        Command::Plugins(PluginsCmd::Doctor { json }) => {
            let host = build_host(&cli, python_level)?;
            plugins::doctor(&host, *json)
        }
        Command::Plugins(PluginsCmd::List { json }) => {
            crate::plugins::install::sweep_interrupted(&home_of(&cli));
            let host = build_host(&cli, python_level)?;
            if *json {
                print_json(&host.plugins());
            } else {
                print_plugins(&host);
                let stray = stray_entries(&home_of(&cli));
                if !stray.is_empty() {
                    eprintln!(
                        "note: config.json names plugins that are not installed: {}; remove them with: plughost plugins forget --stray",
                        stray.join(", ")
                    );
                }
            }
            Ok(0)
        }
        Command::Tools(ToolsCmd::List { json, workspace }) => {
            let host = build_host_with_builtins(&cli, python_level, workspace.as_ref())?;
            let tools: Vec<_> = host
                .registry()
                .tools()
                .into_iter()
                .map(|t| &t.spec)
                .collect();
            if *json {
                print_json(&tools);
            } else if tools.is_empty() {
                println!("No tools registered.");
            } else {
                let rows = tools
                    .iter()
                    .map(|t| vec![t.name.clone(), t.plugin.clone(), first_line(&t.description)])
                    .collect::<Vec<_>>();
                println!(
                    "{}",
                    table::render(&["TOOL", "PLUGIN", "DESCRIPTION"], &rows)
                );
            }
            Ok(0)
        }
        Command::Tools(ToolsCmd::Call {
            name,
            args,
            session,
            timeout,
            workspace,
        }) => {
            let args = parse_args(args.as_deref())?;
            let host = build_host_with_builtins(&cli, python_level, workspace.as_ref())?;
            let known: Vec<String> = host
                .registry()
                .tools()
                .iter()
                .map(|t| t.spec.name.clone())
                .collect();
            runtime().block_on(crate::core::dispatch::fire_host_start(host.registry()));
            let result = match timeout {
                None => runtime().block_on(host.call_tool(name, args, session)),
                Some(limit) => call_with_timeout(host, name, args, session, *limit),
            };
            println!("{}", result.text);
            if matches!(result.outcome, crate::core::outcome::ToolOutcome::NotFound) {
                eprintln!(
                    "plughost: no tool named '{name}'{}; see: plughost tools list",
                    suggest::did_you_mean(name, known.iter().map(String::as_str))
                );
            }
            Ok(if result.is_ok() { 0 } else { 1 })
        }
        Command::Commands(CommandsCmd::List { json }) => {
            let host = build_host(&cli, python_level)?;
            let commands = host.registry().commands();
            if *json {
                let list: Vec<Value> = std::iter::once(json!({"name": "help", "description": "List the commands", "args_hint": "", "plugin": "core"}))
                    .chain(commands.iter().map(|c| {
                        json!({"name": c.name, "description": c.description, "args_hint": c.args_hint, "plugin": c.plugin})
                    }))
                    .collect();
                print_json(&list);
            } else {
                println!("{}", host.help_text());
            }
            Ok(0)
        }
        Command::Commands(CommandsCmd::Run { line }) => {
            let host = build_host(&cli, python_level)?;
            runtime().block_on(crate::core::dispatch::fire_host_start(host.registry()));
            match runtime().block_on(host.run_command(line)) {
                Ok(Some(reply)) => {
                    println!("{reply}");
                    Ok(0)
                }
                Ok(None) => Ok(0),
                Err(crate::host::CommandError::Unknown(typed)) => {
                    let known = host.registry().commands();
                    let names: Vec<String> = known
                        .iter()
                        .map(|c| format!("/{}", c.name))
                        .chain(["/help".to_string()])
                        .collect();
                    Err(Failure::failed(format!(
                        "unknown command '/{typed}'{}; type /help to list the commands",
                        suggest::did_you_mean(
                            &format!("/{typed}"),
                            names.iter().map(String::as_str)
                        )
                    )))
                }
                Err(e) => Err(Failure::failed(e.to_string())),
            }
        }
        Command::Skills(SkillsCmd::List { json }) => {
            let host = build_host(&cli, python_level)?;
            let skills = host.registry().skills();
            if *json {
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
            Ok(0)
        }
        Command::Hermes { name, args } => {
            let _host = build_host(&cli, python_level)?;
            match name {
                None => {
                    let commands = crate::dialects::hermes::cli::list();
                    if commands.is_empty() {
                        println!("No Hermes plugin registers a CLI command.");
                    }
                    for (name, help, plugin) in commands {
                        println!("{name}  {help}  ({plugin})");
                    }
                    Ok(0)
                }
                Some(name) => crate::dialects::hermes::cli::run(name, args).map_err(|e| match e {
                    crate::dialects::hermes::cli::CliError::Unknown { .. } => {
                        Failure::usage(e.to_string())
                    }
                    _ => Failure::failed(e.to_string()),
                }),
            }
        }
        Command::Skills(SkillsCmd::View { name }) => {
            let host = build_host(&cli, python_level)?;
            let text = host
                .skill(name)
                .map_err(|e| skill_failure(&host, name, e))?;
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            Ok(0)
        }
    }
}

/// `tools call --timeout`: the call runs on its own thread so the limit
/// holds even for a synchronous in-process handler (which is left behind:
/// the process exits when the command is done). An isolated plugin's
/// call is dropped at the limit, which stops its worker.
fn call_with_timeout(
    host: Host,
    name: &str,
    args: Value,
    session: &str,
    limit: std::time::Duration,
) -> crate::core::dispatch::ToolResult {
    use crate::core::outcome::ToolOutcome;
    let host = std::sync::Arc::new(host);
    let (tx, rx) = std::sync::mpsc::channel();
    let (calling, name_owned, session) = (host.clone(), name.to_string(), session.to_string());
    let spawned = std::thread::Builder::new()
        .name("plughost-tools-call".into())
        .spawn(move || {
            let call = calling.call_tool(&name_owned, args, &session);
            let result = runtime().block_on(async { tokio::time::timeout(limit, call).await });
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

fn home_of(cli: &Cli) -> PathBuf {
    config::resolve_home(cli.home.as_deref())
}

/// `plugins enable` / `disable`. Enabling a name no installed plugin has
/// is refused (a typo would otherwise sit in config.json doing nothing)
/// unless `force`; disabling one only warns, as it cannot switch anything
/// on.
fn set_enabled(cli: &Cli, name: &str, enable: bool, force: bool) -> Result<u8, Failure> {
    if name.trim().is_empty() {
        return Err(Failure::usage(
            "NAME must be a plugin's key (it was empty); see: plughost plugins list",
        ));
    }
    let home = home_of(cli);
    // An unusable config.json is reported first: it is the bigger problem.
    config::read_plugin_lists(&home)?;
    let known = known_plugin_keys(&home);
    if !known.iter().any(|k| k == name) {
        let hint = suggest::did_you_mean(name, known.iter().map(String::as_str));
        if !force {
            return Err(Failure::failed(format!(
                "no plugin named '{name}' is installed{hint}; see: plughost plugins list \
                 (to record the name anyway, pass --force)"
            )));
        }
        tracing::warn!(
            "no plugin named '{name}' is installed{hint}; recording it in config.json anyway"
        );
    }
    if enable {
        config::enable_plugin(&home, name)?;
        println!("Enabled {name}.");
    } else {
        config::disable_plugin(&home, name)?;
        println!("Disabled {name}.");
    }
    println!("{RESTART}");
    Ok(0)
}

/// The host for `tools list` / `tools call`: the plugins plus the agent's
/// built-in tools, confined to `workspace` (default `<home>/workspace`),
/// so what the agent can call can also be listed and tried by hand.
fn build_host_with_builtins(
    cli: &Cli,
    python_level: u8,
    workspace: Option<&PathBuf>,
) -> Result<Host, Failure> {
    use crate::agent::tools::{builtin_tools, ToolLimits, Workspace};
    let dir = workspace
        .cloned()
        .unwrap_or_else(|| home_of(cli).join("workspace"));
    let workspace = Workspace::new(&dir)
        .map_err(|e| Failure::failed(format!("cannot use the workspace {}: {e}", dir.display())))?;
    let mut builder = host_builder(cli, python_level);
    for tool in builtin_tools(&workspace, &ToolLimits::default()) {
        builder = builder.tool(tool);
    }
    Ok(builder.build()?)
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
    let skills = host.registry().skills();
    let hint = suggest::did_you_mean(name, skills.iter().map(|s| s.name.as_str()));
    Failure::failed(format!("{error}{hint}"))
}

/// Names in plugins.enabled / plugins.disabled that no installed plugin
/// has (typos, removed plugins), for `plugins list` and `plugins forget --stray`.
pub(crate) fn stray_entries(home: &std::path::Path) -> Vec<String> {
    let Ok(lists) = config::read_plugin_lists(home) else {
        return Vec::new();
    };
    let known = known_plugin_keys(home);
    let mut stray: Vec<String> = lists
        .enabled
        .iter()
        .chain(&lists.disabled)
        .filter(|n| !known.contains(n))
        .cloned()
        .collect();
    stray.sort();
    stray.dedup();
    stray
}

/// Keys of every plugin discovery can see (no Python needed).
pub(crate) fn known_plugin_keys(home: &std::path::Path) -> Vec<String> {
    use crate::plugins::discovery::{discover, Source};
    // Project plugins count whether or not they are switched on yet
    // (PLUGHOST_ENABLE_PROJECT_PLUGINS): enabling one first is legitimate.
    let roots = vec![
        (Source::User, home.join("plugins")),
        (Source::Project, PathBuf::from(".plughost/plugins")),
    ];
    let mut keys = bundled_keys(home);
    keys.extend(
        discover(
            &roots,
            &config::PluginLists::default(),
            crate::dialects::formats(),
        )
        .into_iter()
        .map(|c| c.key),
    );
    // Plugins of other APIs (Hermes's own directories): their keys and
    // manifest names, either of which enables them.
    for c in crate::dialects::discover_all(home, &config::PluginLists::default()) {
        if let Ok(manifest) = &c.manifest {
            keys.push(manifest.name.clone());
        }
        keys.push(c.key);
    }
    keys
}

/// Keys of the bundled plugins, whether or not they could be written out.
pub(crate) fn bundled_keys(home: &std::path::Path) -> Vec<String> {
    use crate::plugins::discovery::{discover, Source};
    match crate::plugins::bundled::locate(home) {
        Ok(located) => discover(
            &[(Source::Bundled, located.dir().to_path_buf())],
            &config::PluginLists::default(),
            crate::dialects::formats(),
        )
        .into_iter()
        .map(|c| c.key)
        .collect(),
        Err(missing) => missing.names,
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

fn print_plugins(host: &Host) {
    let plugins = host.plugins();
    if plugins.is_empty() {
        println!(
            "No plugins found (bundled, {}).",
            host.home().join("plugins").display()
        );
        return;
    }
    let rows = plugins
        .iter()
        .map(|p| {
            let status = if p.loaded {
                "loaded".to_string()
            } else if let Some(e) = &p.error {
                if p.enabled {
                    format!("error: {e}")
                } else {
                    format!("off: {e}")
                }
            } else {
                "off".to_string()
            };
            let mut provides = [
                (p.tools.len(), "tool"),
                (p.hooks.len(), "hook"),
                (p.commands.len(), "command"),
                (p.skills.len(), "skill"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}{}", if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", ");
            // A backend plugin's web providers (its manifest's provides_web_providers).
            if !p.provides_web_providers.is_empty() {
                let web = format!("web: {}", p.provides_web_providers.join(", "));
                provides = if provides.is_empty() {
                    web
                } else {
                    format!("{provides}, {web}")
                };
            }
            vec![
                p.key.clone(),
                p.version.clone(),
                p.source.as_str().to_string(),
                provides,
                status,
            ]
        })
        .collect::<Vec<_>>();
    println!(
        "{}",
        table::render(
            &["PLUGIN", "VERSION", "SOURCE", "PROVIDES", "STATUS"],
            &rows
        )
    );
}
