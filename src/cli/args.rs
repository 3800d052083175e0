//! The command line's grammar (clap): every subcommand and its flags.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::plugins::config;

#[derive(Parser, Debug)]
#[command(
    name = "plughost",
    version,
    about = "Run Python agent plugins inside a fast Rust agent loop"
)]
pub struct Cli {
    /// More log output (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(super) verbose: u8,
    /// The plughost home (overrides PLUGHOST_HOME; default ~/.plughost).
    #[arg(long, global = true, value_name = "DIR")]
    pub(super) home: Option<PathBuf>,
    /// Run these plugins each in its own worker process, so a crash or a
    /// spin in one cannot take plughost down: all, none, or KEY[,KEY…]
    /// (overrides plugins.isolate of config.json).
    #[arg(long, global = true, value_name = "WHICH", value_parser = isolation)]
    pub(super) isolate: Option<config::Isolation>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
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
        /// What the user says to the agent.
        message: String,
        /// Print the whole turn (messages, tool calls, results, timings) as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        agent: super::agent::AgentArgs,
    },
    /// Chat with the agent interactively.
    Chat {
        #[command(flatten)]
        agent: super::agent::AgentArgs,
    },
    /// Run a terminal command a Hermes plugin registered (register_cli_command);
    /// without NAME, list them.
    // Everything after NAME is the plugin's, `-h` included (its argparse
    // help); `plughost hermes -h` lists the commands.
    #[command(disable_help_flag = true)]
    Hermes {
        /// The command to run (without it, the commands are listed).
        #[arg(allow_hyphen_values = true)]
        name: Option<String>,
        /// The command's own arguments (parsed by its argparse parser).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Serve the plugins' tools, skills and slash commands over MCP on stdin/stdout.
    Mcp {
        #[command(flatten)]
        args: super::serve::McpArgs,
    },
    /// Serve MCP at /mcp and the agent loop as an OpenAI-compatible API over HTTP.
    Serve {
        #[command(flatten)]
        args: super::serve::ServeArgs,
    },
    /// Serve one isolated plugin on stdin/stdout (started by plughost itself).
    #[command(name = "__worker", hide = true)]
    Worker,
    /// List the plugins' scheduled tasks, or run one now.
    #[command(subcommand)]
    Cron(CronCmd),
    /// Move file sessions into PostgreSQL (for `serve --sessions`).
    #[command(subcommand)]
    Sessions(super::sessions::SessionsCmd),
}

/// `plughost cron …`.
#[derive(Subcommand, Debug)]
pub(super) enum CronCmd {
    /// The scheduled tasks of the loaded plugins (Felix cron_tasks).
    List {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Run one scheduled task now, as plughost serve runs it on its timer.
    Run {
        /// The task's name (as `plughost cron list` shows it).
        name: String,
    },
}

/// `--isolate`: all, none, or plugin keys separated by commas.
fn isolation(value: &str) -> Result<config::Isolation, String> {
    config::Isolation::parse(value)
}

#[derive(Subcommand, Debug)]
pub(super) enum PluginsCmd {
    /// Every discovered plugin and its load status.
    List {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Add a plugin to plugins.enabled (and take it out of plugins.disabled).
    Enable {
        /// The plugin's key (as `plughost plugins list` shows it).
        name: String,
        /// Record the name even though no such plugin is installed (yet).
        #[arg(long)]
        force: bool,
        /// Then have the `plughost serve` running on this home reload its
        /// plugins (POST /admin/reload; PLUGHOST_API_KEY is sent as its key).
        #[arg(long)]
        reload: bool,
    },
    /// Add a plugin to plugins.disabled (and take it out of plugins.enabled).
    Disable {
        /// The plugin's key (as `plughost plugins list` shows it).
        name: String,
    },
    /// Install a plugin from a git URL, owner/repo[/sub/path], URL#sub/path,
    /// a local directory, or NAME@MARKETPLACE (a marketplace added).
    Install {
        /// The plugin to install (not with --from-lock).
        #[arg(required_unless_present = "from_lock", conflicts_with = "from_lock")]
        source: Option<String>,
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
        /// Check out this commit, branch or tag of a git source (pinned;
        /// the commit is recorded in plugins.lock.json).
        #[arg(long = "ref", value_name = "REV")]
        git_ref: Option<String>,
        /// Install every plugin a lock file records, each at its commit,
        /// checking its content hash.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["git_ref", "editable", "dialect"])]
        from_lock: Option<PathBuf>,
        /// A development install: link the local directory instead of
        /// copying it; its changes are never checked against the lock.
        #[arg(long, conflicts_with = "git_ref")]
        editable: bool,
        /// Give it a Python environment of its own (on the CPython its
        /// requires-python asks for) instead of the shared one; it then
        /// always runs isolated, in a worker on that environment.
        #[arg(long)]
        own_env: bool,
        /// Then have the `plughost serve` running on this home reload its
        /// plugins (POST /admin/reload; PLUGHOST_API_KEY is sent as its key).
        #[arg(long)]
        reload: bool,
    },
    /// Accept the changed files of a plugin whose lock entry no longer
    /// matches: show what changed and record the files as they are now.
    Accept {
        /// The plugin's key (as `plughost plugins list` shows it).
        name: String,
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
        /// The plugin's key (as `plughost plugins list` shows it).
        name: String,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long = "yes")]
        yes: bool,
    },
    /// Check every plugin: load status, registrations, environment, collisions, interpreter.
    Doctor {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// The plugins' Python dependencies (installed with uv).
    #[command(subcommand)]
    Deps(DepsCmd),
    /// Claude Code marketplaces (`.claude-plugin/marketplace.json`): install
    /// their plugins with `plugins install NAME@MARKETPLACE`.
    #[command(subcommand)]
    Marketplace(MarketplaceCmd),
}

/// `plugins marketplace …`.
#[derive(Subcommand, Debug)]
pub(super) enum MarketplaceCmd {
    /// Add a marketplace: a directory, a git URL, or owner/repo (GitHub).
    Add {
        /// The marketplace: a directory or a git URL holding
        /// .claude-plugin/marketplace.json, or owner/repo.
        source: String,
    },
    /// The marketplaces added, and their plugins.
    List {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Pull the git marketplaces (all, or NAME) and read them again.
    Update {
        /// The marketplace's name (as `plugins marketplace list` shows it); all when left out.
        name: Option<String>,
    },
    /// Forget a marketplace (its installed plugins stay).
    Remove {
        /// The marketplace's name (as `plugins marketplace list` shows it).
        name: String,
    },
}

/// `plugins deps …`.
#[derive(Subcommand, Debug)]
pub(super) enum DepsCmd {
    /// Install every installed plugin's dependencies again: its own
    /// environment, or the shared one resolved from all the others.
    Sync,
}

#[derive(Subcommand, Debug)]
pub(super) enum ToolsCmd {
    /// Every registered tool, the built-in ones (plugin `builtin`) included.
    List {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
        /// Directory the built-in file tools and exec are confined to (default <home>/workspace).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Call a tool through the full pipeline (hooks included) and print its result.
    Call {
        /// The tool's name (as `plughost tools list` shows it).
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
        #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = super::agent::seconds)]
        timeout: Option<std::time::Duration>,
        /// Directory the built-in file tools and exec are confined to (default <home>/workspace).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum CommandsCmd {
    /// Every slash command.
    List {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Run a slash command line, e.g. "/ping hello".
    Run {
        /// The command line, e.g. `/ping hello` (the `/` may be left out).
        line: String,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum SkillsCmd {
    /// Every plugin skill (plugin:name).
    List {
        /// Print it as JSON (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Print a skill's SKILL.md.
    View {
        /// The skill's name (as `plughost skills list` shows it).
        name: String,
    },
}
