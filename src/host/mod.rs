//! The host: discovery, loading, and the API a Rust service (or the CLI)
//! uses to list plugins, call tools, fire events, run commands, read skills.

mod build;
pub mod doctor;
mod load;
pub mod reload;

pub use build::HostBuilder;
pub use reload::{LoadedVersion, PluginSet, ReloadReport};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::core::agent_link::{AgentLink, AgentSlot, Injected};
use crate::core::dispatch::{self, ToolResult};
use crate::core::extensions::Extensions;
use crate::core::hooks::{HookAction, HookEvent, HookPayload};
use crate::core::outcome::PluginError;
use crate::core::registry::{CommandReturn, Registration, Registry};
use crate::plugins::config::{self, PluginLists};
use crate::plugins::discovery::Source;

/// One discovered plugin and what became of it (`plugins list --json`).
#[derive(Clone, Debug, Serialize)]
pub struct PluginRecord {
    pub key: String,
    pub name: String,
    pub version: String,
    pub description: String,
    pub author: String,
    pub source: Source,
    pub kind: String,
    /// Selected by the enablement rules.
    pub enabled: bool,
    /// `loaded`, `failed` (enabled but broken), `skipped` (an unsupported
    /// kind), `disabled` (in plugins.disabled) or `not-enabled`.
    pub status: PluginStatus,
    /// Imported and registered without error.
    pub loaded: bool,
    /// Why it is not loaded (not enabled, disabled, a failure), else null.
    pub error: Option<String>,
    /// The failure behind `error` when loading raised: exception type,
    /// message, traceback, and the `file:line` to look at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<PluginError>,
    /// The plugin API it is loaded through (`flowly`, `hermes`, `codumentor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dialect: Option<crate::plugins::format::DialectId>,
    pub path: PathBuf,
    pub tools: Vec<String>,
    pub hooks: Vec<String>,
    pub commands: Vec<String>,
    /// Qualified `plugin:name`.
    pub skills: Vec<String>,
    pub requires_env: Vec<String>,
    /// The web search/extract backends its manifest declares (`kind: backend`).
    pub provides_web_providers: Vec<String>,
    /// Runs in its own worker process (`plugins.isolate`, `--isolate`).
    pub isolated: bool,
    /// What its dialect loads (`module:register` for Felix); null when the
    /// dialect has no such notion (Flowly's `__init__.py`).
    pub entry: Option<String>,
    /// Plugins it loads after (Codumentor); empty for the others.
    pub dependencies: Vec<String>,
}

impl PluginRecord {
    /// What a plugin depending on this one needs to know of it.
    pub(super) fn dependency_state(&self) -> crate::dialects::DependencyState {
        use crate::dialects::DependencyState;
        if self.loaded {
            return DependencyState::Loaded;
        }
        match self.status {
            PluginStatus::Disabled => DependencyState::Disabled,
            PluginStatus::NotEnabled => DependencyState::NotEnabled,
            _ => DependencyState::Failed(self.error.clone()),
        }
    }

    /// The plugin as a dialect's `plugins doctor` section sees it.
    pub(crate) fn doctor_view(&self) -> crate::dialects::DoctorPlugin<'_> {
        use crate::dialects::DependencyState;
        crate::dialects::DoctorPlugin {
            key: &self.key,
            loaded: self.loaded,
            state: match self.status {
                PluginStatus::Loaded => DependencyState::Loaded,
                PluginStatus::Disabled => DependencyState::Disabled,
                PluginStatus::NotEnabled => DependencyState::NotEnabled,
                PluginStatus::Skipped | PluginStatus::Failed => {
                    DependencyState::Failed(self.error.clone())
                }
            },
            status_text: self.status.as_str(),
            provides_web_providers: &self.provides_web_providers,
        }
    }

    /// A record for contributions registered directly, not from a plugin directory.
    pub(super) fn direct(owner: &str) -> PluginRecord {
        PluginRecord {
            key: owner.to_string(),
            name: owner.to_string(),
            version: String::new(),
            description: String::new(),
            author: String::new(),
            source: Source::User,
            kind: "standalone".into(),
            enabled: true,
            status: PluginStatus::Loaded,
            loaded: true,
            error: None,
            failure: None,
            dialect: None,
            path: PathBuf::new(),
            tools: Vec::new(),
            hooks: Vec::new(),
            commands: Vec::new(),
            skills: Vec::new(),
            requires_env: Vec::new(),
            provides_web_providers: Vec::new(),
            isolated: false,
            entry: None,
            dependencies: Vec::new(),
        }
    }
}

/// What became of a discovered plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginStatus {
    Loaded,
    Failed,
    Skipped,
    Disabled,
    NotEnabled,
}

impl PluginStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginStatus::Loaded => "loaded",
            PluginStatus::Failed => "failed",
            PluginStatus::Skipped => "skipped",
            PluginStatus::Disabled => "disabled",
            PluginStatus::NotEnabled => "not-enabled",
        }
    }
}

/// Two owners registered the same tool name; the last one won.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ToolCollision {
    pub tool: String,
    pub winner: String,
    pub overridden: String,
}

/// Errors building a host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Python(#[from] crate::runtime::StartError),
    /// The runtime asked for runs with other settings (see
    /// [`crate::runtime::RuntimeError`]).
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// Enabled bundled plugins (command-guard among them) could not be
    /// written to disk; see [`HostBuilder::allow_missing_bundled`].
    #[error("{0}; refusing to start without them")]
    Bundled(crate::plugins::bundled::BundledUnavailable),
    /// Under [`crate::core::registry::CollisionPolicy::Refuse`], two owners registered one tool name.
    #[error("tool '{}' of '{}' collides with the one '{}' registered (the host refuses collisions)", .0.tool, .0.refused, .0.owner)]
    Collision(crate::core::registry::RefusedTool),
    /// A reload that could not run to its end (the old plugins keep running).
    #[error("{0}")]
    Reload(String),
}

/// Errors of `run_command`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("not a slash command: '{0}' (commands start with '/'; try /help)")]
    NotACommand(String),
    #[error("unknown command '/{0}'; type /help to list the commands")]
    Unknown(String),
    #[error("command '/{name}' failed: {}", .error.described())]
    Failed {
        name: String,
        error: Box<PluginError>,
    },
}

/// Errors of `skill`.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error(
        "unknown skill '{0}'; run `plughost skills list` to see the skills (names are plugin:name)"
    )]
    Unknown(String),
    #[error("cannot read skill '{name}' at {path}: {message}")]
    Read {
        name: String,
        path: PathBuf,
        message: String,
    },
}

/// A running set of plugins and native contributions.
pub struct Host {
    /// What dialects and the agent keep per host ([`Extensions`]).
    extensions: Arc<Extensions>,
    home: PathBuf,
    /// The plugins in force: each call pins the set it started on
    /// ([`reload`]); a reload swaps in a new one.
    current: arc_swap::ArcSwap<PluginSet>,
    roots: Vec<(Source, PathBuf)>,
    /// How to discover and load again (one reload at a time).
    reloader: std::sync::Mutex<build::Recipe>,
    /// The generation of the set in force, sent after each swap, so what a
    /// server mounts from a set (routes, cron, auth) follows reloads.
    reloaded: tokio::sync::watch::Sender<u64>,
    /// Keeps a temporary copy of the bundled plugins (used when the cache
    /// cannot be written) on disk while the host lives.
    _bundled: Option<crate::plugins::bundled::Located>,
}

/// A part of the plugin set in force when it was taken, kept alive (with
/// the plugins it refers to) while it is held, whatever reloads happen.
pub struct Pinned<T: ?Sized + 'static> {
    set: Arc<PluginSet>,
    view: fn(&PluginSet) -> &T,
}

impl<T: ?Sized> std::ops::Deref for Pinned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        (self.view)(&self.set)
    }
}

impl<T: ?Sized + std::fmt::Debug> std::fmt::Debug for Pinned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<'a, T> IntoIterator for &'a Pinned<[T]> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        (**self).iter()
    }
}

/// The runtime of the host whose extensions these are (kept there by its
/// build); the process's for a map no build filled.
pub(crate) fn runtime_of(extensions: &Extensions) -> crate::runtime::Runtime {
    extensions
        .peek::<crate::runtime::Runtime>()
        .map(|rt| (*rt).clone())
        .unwrap_or_else(crate::runtime::Runtime::current)
}

/// Commands the host answers itself, before plugin commands (the command
/// table's rows [`crate::core::commands::answered_by_host`] names).
pub const CORE_COMMANDS: [&str; 2] = ["help", "plugins"];

impl Host {
    /// Start building a host.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// Start building a host on `runtime` (as wasmtime's `Linker::new(&engine)`).
    pub fn builder_in(runtime: &crate::runtime::Runtime) -> HostBuilder {
        HostBuilder::default().runtime(runtime)
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The runtime this host was built from.
    pub fn runtime(&self) -> crate::runtime::Runtime {
        runtime_of(&self.extensions)
    }

    /// What dialects and the agent keep for this host (instead of statics).
    pub fn extensions(&self) -> &Arc<Extensions> {
        &self.extensions
    }

    /// Make `link` the agent this host's plugins reach (their model, the
    /// host's tools); the latest agent made wins.
    /// The tokio runtime the caller runs on is remembered for the plugins'
    /// synchronous calls into the agent ([`crate::runtime::CallerRuntime`]).
    pub fn set_agent(&self, link: Arc<dyn AgentLink>) {
        self.extensions
            .get::<crate::runtime::CallerRuntime>()
            .capture();
        self.extensions.get::<AgentSlot>().set(link);
    }

    /// The messages plugins injected into `session`'s conversation since
    /// the last call, oldest first (a turn takes them at each model call).
    pub fn take_injected(&self, session: &str) -> Vec<String> {
        self.extensions
            .peek::<Injected>()
            .map(|inbox| inbox.take(session))
            .unwrap_or_default()
    }

    /// The `plugins.enabled` / `plugins.disabled` lists in force.
    pub fn plugin_lists(&self) -> Pinned<PluginLists> {
        self.pin(|s| &s.lists)
    }

    /// The set of plugins in force now; a caller that makes several calls
    /// which must see the same plugins holds it.
    pub fn plugin_set(&self) -> Arc<PluginSet> {
        self.current.load_full()
    }

    fn pin<T: ?Sized>(&self, view: fn(&PluginSet) -> &T) -> Pinned<T> {
        Pinned {
            set: self.current.load_full(),
            view,
        }
    }

    /// The worker state of isolated plugin `key` (running, restarting,
    /// disabled by its breaker) and its crash counts; `None` when it is not
    /// an isolated plugin that loaded.
    pub fn worker_status(&self, key: &str) -> Option<crate::isolation::WorkerStatus> {
        self.current.load().worker_status(key)
    }

    /// Every discovered plugin, in load order.
    pub fn plugins(&self) -> Pinned<[PluginRecord]> {
        self.pin(|s| &s.plugins)
    }

    /// The registry of the set in force (held, it stays that set's).
    pub fn registry(&self) -> Pinned<Registry> {
        self.pin(|s| &s.registry)
    }

    /// Tool names registered more than once, and who won.
    pub fn collisions(&self) -> Pinned<[ToolCollision]> {
        self.pin(|s| &s.collisions)
    }

    /// The directories scanned for plugins, by source.
    pub fn roots(&self) -> &[(Source, PathBuf)] {
        &self.roots
    }

    /// Run one tool call through the whole pipeline (hooks included).
    pub async fn call_tool(&self, name: &str, args: Value, session_id: &str) -> ToolResult {
        // A guard, not a reference count of its own: half the locked
        // instructions on every call. Like the count, it keeps the set it
        // loaded alive through a reload, which does not wait for it.
        let set = self.current.load();
        dispatch::call_tool(&set.registry, name, args, session_id, "").await
    }

    /// Fire `event` with `payload`; returns the actions callbacks asked for.
    pub async fn fire(&self, event: HookEvent, payload: HookPayload<'_>) -> Vec<HookAction> {
        let set = self.current.load_full();
        dispatch::fire(&set.registry, event, payload).await
    }

    /// Run a slash command line such as `/ping hello`; `Ok(None)` means the
    /// command gave no reply. `/help` is built in.
    pub async fn run_command(&self, line: &str) -> Result<Option<String>, CommandError> {
        use crate::core::commands::{builtin, split_line, BuiltinId, Surface};
        let trimmed = line.trim();
        if !trimmed.starts_with('/') {
            return Err(CommandError::NotACommand(trimmed.to_string()));
        }
        let (name, args) = split_line(trimmed);
        // One router serves the CLI, MCP and the wheel alike.
        match builtin(Surface::Cli, &name, args) {
            Some(BuiltinId::Help) => return Ok(Some(self.help_text())),
            Some(BuiltinId::Plugins) => return Ok(Some(self.status_text())),
            _ => {}
        }
        let set = self.current.load_full();
        let Some(command) = set.registry.command(&name) else {
            return Err(CommandError::Unknown(name));
        };
        let outcome = match command.handler.call(args) {
            CommandReturn::Ready(r) => r,
            CommandReturn::Pending(fut) => fut.await,
        };
        outcome.map_err(|error| CommandError::Failed {
            name,
            error: Box::new(error),
        })
    }

    /// The short status the `/plugins` command shows.
    pub fn status_text(&self) -> String {
        let set = self.current.load_full();
        if set.plugins.is_empty() {
            return "No plugins found.".into();
        }
        let mut lines = Vec::new();
        for p in &set.plugins {
            let what = contributions_text(&p.tools, &p.hooks, &p.commands, &p.skills);
            lines.push(match (&p.status, &p.error) {
                (PluginStatus::Loaded, _) if what.is_empty() => {
                    format!("✓ {} ({})", p.key, p.source.as_str())
                }
                (PluginStatus::Loaded, _) => format!("✓ {} ({}): {what}", p.key, p.source.as_str()),
                (status, Some(e)) => format!(
                    "✗ {} ({}) {}: {e}",
                    p.key,
                    p.source.as_str(),
                    status.as_str()
                ),
                (status, None) => {
                    format!("✗ {} ({}) {}", p.key, p.source.as_str(), status.as_str())
                }
            });
        }
        lines.join("\n")
    }

    /// The `/help` text: every command with its description and args hint
    /// (from the command table).
    pub fn help_text(&self) -> String {
        crate::core::commands::CommandTable::new(&self.current.load().registry)
            .help_text(crate::core::commands::Surface::Cli)
    }

    /// The text of skill `plugin:name`.
    pub fn skill(&self, qualified: &str) -> Result<String, SkillError> {
        let set = self.current.load_full();
        let skill = set
            .registry
            .skill(qualified)
            .ok_or_else(|| SkillError::Unknown(qualified.to_string()))?;
        std::fs::read_to_string(&skill.path).map_err(|e| SkillError::Read {
            name: skill.name.clone(),
            path: skill.path.clone(),
            message: e.to_string(),
        })
    }
}

// Reload (see [`reload`]): here because it reaches the host's fields.
impl Host {
    /// Discover and load again, then swap the new set in (see the module
    /// docs). Blocks while plugins load (Python imports, workers starting);
    /// one reload runs at a time. Calls already running finish on the set
    /// they started on.
    pub fn reload(&self) -> Result<ReloadReport, HostError> {
        let recipe = self.reloader.lock().unwrap_or_else(|e| e.into_inner());
        let previous = self.current.load_full();
        let (set, mut report) = build::HostBuilder::reload_set(&recipe, self)?;
        report.config_sections = reload::changed_sections(&previous.config, &set.config);
        self.current.store(Arc::new(set));
        drop(previous);
        self.reloaded.send_replace(report.generation);
        tracing::info!(
            "plugins reloaded (generation {}): {} added, {} changed, {} removed, {} kept at their old version, config sections changed: {:?}",
            report.generation,
            report.added.len(),
            report.changed.len(),
            report.removed.len(),
            report.failed.len(),
            report.config_sections
        );
        Ok(report)
    }

    /// [`reload`](Self::reload) on a blocking thread, then the reload
    /// events of the new set (Codumentor's `onConfigReload` with the
    /// changed sections, when some changed).
    pub async fn reload_now(self: &Arc<Self>) -> Result<ReloadReport, HostError> {
        let host = self.clone();
        let report = tokio::task::spawn_blocking(move || host.reload())
            .await
            .unwrap_or_else(|e| Err(HostError::Reload(format!("the reload stopped: {e}"))))?;
        if !report.config_sections.is_empty() {
            let set = self.current.load_full();
            reload::fire_reloaded(&set.registry, &report.config_sections, &set.config).await;
        }
        Ok(report)
    }

    /// Each loaded plugin's version and when it was loaded.
    pub fn loaded_versions(&self) -> Vec<LoadedVersion> {
        self.current.load().versions()
    }

    /// The generation of the set in force, changing after each reload: a
    /// server re-mounts what it took from the set (plugin routes, cron
    /// tasks, the auth mode) when it changes.
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloaded.subscribe()
    }
}

/// `tools a, b; hooks c; commands /d; skills p:e` (empty parts left out).
pub fn contributions_text(
    tools: &[String],
    hooks: &[String],
    commands: &[String],
    skills: &[String],
) -> String {
    let commands: Vec<String> = commands.iter().map(|c| format!("/{c}")).collect();
    [
        ("tools", tools.join(", ")),
        ("hooks", hooks.join(", ")),
        ("commands", commands.join(", ")),
        ("skills", skills.join(", ")),
    ]
    .into_iter()
    .filter(|(_, list)| !list.is_empty())
    .map(|(what, list)| format!("{what} {list}"))
    .collect::<Vec<_>>()
    .join("; ")
}

/// Move the model providers among `registrations` into `profiles` (the
/// host's): a plugin registers them like its other parts, in-process or
/// from its worker, and the agent's provider table reads them there.
fn take_model_providers(
    registrations: &mut Vec<Registration>,
    profiles: &crate::core::model_profiles::ModelProfiles,
) {
    registrations.retain(|r| match r {
        Registration::ModelProvider(p) => {
            profiles.add(p.clone());
            false
        }
        _ => true,
    });
}
