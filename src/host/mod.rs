//! The host: discovery, loading, and the API a Rust service (or the CLI)
//! uses to list plugins, call tools, fire events, run commands, read skills.

pub mod doctor;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::core::agent_link::{AgentLink, AgentSlot, Injected};
use crate::core::dispatch::{self, ToolResult};
use crate::core::extensions::Extensions;
use crate::core::hooks::{HookAction, HookCallback, HookEntry, HookEvent, HookPayload, HookStats};
use crate::core::outcome::PluginError;
use crate::core::registry::{
    CollisionPolicy, Command, CommandReturn, Registration, Registry, Tool, NATIVE_OWNER,
};
use crate::plugins::config::{self, PluginLists};
use crate::plugins::discovery::{self, Candidate, Source};

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
    fn dependency_state(&self) -> crate::dialects::DependencyState {
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
    fn direct(owner: &str) -> PluginRecord {
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
    /// Enabled bundled plugins (command-guard among them) could not be
    /// written to disk; see [`HostBuilder::allow_missing_bundled`].
    #[error("{0}; refusing to start without them")]
    Bundled(crate::plugins::bundled::BundledUnavailable),
    /// Under [`CollisionPolicy::Refuse`], two owners registered one tool name.
    #[error("tool '{}' of '{}' collides with the one '{}' registered (the host refuses collisions)", .0.tool, .0.refused, .0.owner)]
    Collision(crate::core::registry::RefusedTool),
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

/// How to build a [`Host`].
#[derive(Default)]
pub struct HostBuilder {
    home: Option<PathBuf>,
    project_dir: Option<PathBuf>,
    enable_project_plugins: Option<bool>,
    bundled_dir: Option<PathBuf>,
    extra_enabled: Vec<String>,
    extra_disabled: Vec<String>,
    python_log_level: Option<u8>,
    runtime: crate::runtime::Runtime,
    collision: Option<CollisionPolicy>,
    tools: Vec<Tool>,
    hooks: Vec<(HookEvent, HookEntry)>,
    commands: Vec<Command>,
    hook_timeout: Option<std::time::Duration>,
    direct: Vec<(String, Vec<Registration>)>,
    allow_missing_bundled: bool,
    isolation: Option<crate::plugins::config::Isolation>,
    worker_command: Option<crate::isolation::WorkerCommand>,
    isolation_load_timeout: Option<std::time::Duration>,
    breaker: Option<(u32, std::time::Duration)>,
    limits: Option<crate::plugins::config::LimitTable>,
}

impl HostBuilder {
    /// What happens when two owners register one tool name, for every
    /// source. Unset, each keeps its default: the last writer wins (native
    /// tools, Flowly and the wheel's direct registrations, which come last,
    /// with a warning), except that a Hermes tool registered without
    /// `override=True` keeps a tool of another toolset, as Hermes does.
    pub fn collision_policy(mut self, policy: CollisionPolicy) -> Self {
        self.collision = Some(policy);
        self
    }

    /// The runtime the host runs its plugins on (default:
    /// [`Runtime::python`](crate::runtime::Runtime::python));
    /// [`Runtime::none`](crate::runtime::Runtime::none) for a host of native
    /// parts that must never start CPython.
    pub fn runtime(mut self, runtime: &crate::runtime::Runtime) -> Self {
        self.runtime = runtime.clone();
        self
    }

    /// The plughost home (default: `$PLUGHOST_HOME`, else `~/.plughost`).
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }
    /// The project directory whose `.plughost/plugins/` is scanned when
    /// project plugins are enabled (default: the current directory).
    pub fn project_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.project_dir = Some(dir.into());
        self
    }
    /// Scan project plugins (default: `PLUGHOST_ENABLE_PROJECT_PLUGINS` is truthy).
    pub fn enable_project_plugins(mut self, on: bool) -> Self {
        self.enable_project_plugins = Some(on);
        self
    }
    /// Scan this directory for bundled plugins instead of the built-in ones.
    pub fn bundled_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bundled_dir = Some(dir.into());
        self
    }
    /// Treat these plugin keys as listed in `plugins.enabled` (not saved).
    pub fn enable(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extra_enabled.extend(keys.into_iter().map(Into::into));
        self
    }
    /// Treat these plugin keys as listed in `plugins.disabled` (not saved).
    pub fn disable(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extra_disabled.extend(keys.into_iter().map(Into::into));
        self
    }
    /// The level Python `logging` is set to (10 debug … 40 error; default 30).
    pub fn python_log_level(mut self, level: u8) -> Self {
        self.python_log_level = Some(level);
        self
    }
    /// Register a native Rust tool (plugins loaded later may override it by name).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }
    /// Register a native Rust hook (runs before plugin hooks of equal priority).
    pub fn hook(self, event: HookEvent, callback: impl HookCallback) -> Self {
        self.hook_with_priority(event, 0, callback)
    }
    /// Register a native Rust hook with a priority (lower runs first).
    pub fn hook_with_priority(
        mut self,
        event: HookEvent,
        priority: i32,
        callback: impl HookCallback,
    ) -> Self {
        self.hooks.push((
            event,
            HookEntry {
                owner: NATIVE_OWNER.into(),
                label: std::any::type_name_of_val(&callback).to_string(),
                priority,
                callback: Arc::new(callback),
                stats: Arc::new(HookStats::default()),
            },
        ));
        self
    }
    /// Give async hooks this long before they are skipped (default: no limit).
    pub fn hook_timeout(mut self, budget: std::time::Duration) -> Self {
        self.hook_timeout = Some(budget);
        self
    }
    /// Contributions made through a [`PluginContext`](crate::dialects::flowly::PluginContext)
    /// outside any plugin directory (the Python API's `Host.register_*`);
    /// applied after the plugins, so they win a name collision.
    pub fn registrations(mut self, owner: &str, registrations: Vec<Registration>) -> Self {
        self.direct.push((owner.to_string(), registrations));
        self
    }
    /// Build even when the bundled plugins cannot be written to disk
    /// (they are then listed as failed, with the reason, and an error is
    /// logged); by default `build` refuses with [`HostError::Bundled`].
    pub fn allow_missing_bundled(mut self) -> Self {
        self.allow_missing_bundled = true;
        self
    }
    /// Which plugins run in their own worker process; overrides
    /// `plugins.isolate` of `config.json` (default: none).
    pub fn isolate(mut self, isolation: crate::plugins::config::Isolation) -> Self {
        self.isolation = Some(isolation);
        self
    }
    /// How to start workers (default: this executable with the hidden
    /// worker subcommand; see [`crate::isolation::serve_if_worker`]).
    pub fn worker_command(mut self, command: crate::isolation::WorkerCommand) -> Self {
        self.worker_command = Some(command);
        self
    }
    /// How long an isolated plugin's `register()` may take (default 30 s);
    /// past it the worker is killed and the plugin marked failed.
    pub fn isolation_load_timeout(mut self, limit: std::time::Duration) -> Self {
        self.isolation_load_timeout = Some(limit);
        self
    }
    /// `crashes` worker crashes within `window` disable an isolated plugin
    /// for the rest of the process (default 3 in 60 s).
    /// OS resource limits of isolated plugins, by key (`"*"` for all);
    /// default: `plugins.limits` of `config.json`.
    pub fn isolation_limits(mut self, limits: crate::plugins::config::LimitTable) -> Self {
        self.limits = Some(limits);
        self
    }
    pub fn isolation_breaker(mut self, crashes: u32, window: std::time::Duration) -> Self {
        self.breaker = Some((crashes.max(1), window));
        self
    }
    /// Register a native slash command.
    pub fn command(mut self, command: Command) -> Self {
        self.commands.push(command);
        self
    }

    /// Discover, load and register everything.
    pub fn build(self) -> Result<Host, HostError> {
        let home = config::resolve_home(self.home.as_deref());
        let mut lists = config::read_plugin_lists(&home)?;
        lists.enabled.extend(self.extra_enabled);
        lists.disabled.extend(self.extra_disabled);

        let bundled = match self.bundled_dir {
            Some(dir) => Ok(crate::plugins::bundled::Located::at(dir)),
            None => crate::plugins::bundled::locate(&home),
        };
        let (bundled_root, unavailable, bundled_copy) = match bundled {
            Ok(located) => (located.dir().to_path_buf(), None, Some(located)),
            Err(e) => (e.cache.clone(), Some(e), None),
        };
        let mut roots = vec![(Source::Bundled, bundled_root)];
        roots.push((Source::User, home.join("plugins")));
        let project_on = self.enable_project_plugins.unwrap_or_else(|| {
            std::env::var("PLUGHOST_ENABLE_PROJECT_PLUGINS")
                .map(|v| config::truthy(&v))
                .unwrap_or(false)
        });
        if project_on {
            let project = self.project_dir.unwrap_or_else(|| PathBuf::from("."));
            roots.push((Source::Project, project.join(".plughost").join("plugins")));
        }
        let seed = unavailable
            .as_ref()
            .map(|e| discovery::missing_bundled(e, &lists, crate::dialects::formats()))
            .unwrap_or_default();
        let mut candidates =
            discovery::discover_after(seed, &roots, &lists, crate::dialects::formats());
        let extensions = Arc::new(Extensions::default());
        // A runtime without Python runs no dialect's discovery: none of
        // what it would find could load, and looking reads the interpreter's path.
        if self.runtime.has_python() {
            // Plugins found already will start Python: the dialects read
            // its path in-process. Without any, they read it without
            // starting the interpreter (a host of native parts never does).
            if candidates
                .iter()
                .any(|c| c.enabled && c.skip_reason.is_none())
            {
                self.runtime.initialize_for_plugins();
            }
            for dialect in crate::dialects::DIALECTS {
                for candidate in dialect.discover_in(&home, &lists, &self.runtime, &extensions) {
                    discovery::admit(&mut candidates, candidate);
                }
            }
        }
        crate::dialects::choose(&home, &mut candidates)?;
        if let Some(missing) = unavailable.and_then(|e| discovery::still_missing(e, &candidates)) {
            if !self.allow_missing_bundled {
                return Err(HostError::Bundled(missing));
            }
            tracing::error!("{missing}");
        }

        let mut registry = Registry::new();
        registry.hook_timeout = self.hook_timeout;
        registry.collision = self.collision;
        let mut collisions = Vec::new();
        for tool in self.tools {
            note_collision(&mut collisions, registry.add_tool(tool), NATIVE_OWNER);
        }
        for command in self.commands {
            registry.add_command(command);
        }
        for (event, entry) in self.hooks {
            registry.add_hook(event, entry);
        }

        let isolation = match self.isolation {
            Some(i) => i,
            None => config::read_isolation(&home)?,
        };
        let settings = isolation_settings(
            &isolation,
            self.worker_command,
            self.isolation_load_timeout,
            self.breaker,
            self.python_log_level.unwrap_or(30),
        );
        let limits = match self.limits {
            Some(l) => l,
            None => config::read_limits(&home)?,
        };
        for key in limits.0.keys() {
            if key != "*" && !isolation.covers(key) {
                tracing::warn!(
                    "plugins.limits.{key} is not enforced: plugin '{key}' runs in-process (limits apply to isolated plugins; add it to plugins.isolate)"
                );
            }
        }
        let needs_python = candidates
            .iter()
            .any(|c| c.enabled && c.skip_reason.is_none() && !isolation.covers(&c.key));
        let level = self
            .python_log_level
            .or(self.runtime.log_level())
            .unwrap_or(30);
        // Whether in-process plugins can run: without Python they fail to
        // load, saying why; a Python that does not start fails the build.
        let python: Result<(), String> = if !needs_python {
            Ok(())
        } else if !self.runtime.has_python() {
            Err("this host was built from Runtime::none(), which runs no Python plugins".into())
        } else {
            crate::runtime::Runtime::start(level)?;
            set_default_home(&home);
            Ok(())
        };
        let mut packages = Vec::new();
        let mut workers = Vec::new();
        let mut plugins: Vec<PluginRecord> = Vec::new();
        let order = crate::dialects::load_order(candidates, &|key| isolation.covers(key));
        for c in order {
            let c = crate::dialects::check_dependencies(c, &|dep| {
                plugins
                    .iter()
                    .rev()
                    .find(|r| r.key == dep)
                    .map(PluginRecord::dependency_state)
            });
            let isolate = isolation
                .covers(&c.key)
                .then(|| (&settings, limits.for_plugin(&c.key)));
            plugins.push(load_candidate(
                c,
                (&home, &extensions, &python),
                isolate,
                &mut registry,
                &mut collisions,
                &mut packages,
                &mut workers,
            ));
        }
        if let Some(source) = RuntimeToolSource::of(&home, &plugins) {
            registry.set_runtime_tools(Arc::new(source));
        }
        for (owner, registrations) in self.direct {
            let mut record = PluginRecord::direct(&owner);
            apply_registrations(
                registrations,
                &owner,
                &mut record,
                &mut registry,
                &mut collisions,
            );
        }
        if let Some(refused) = registry.refused().first() {
            return Err(HostError::Collision(refused.clone()));
        }
        Ok(Host {
            extensions,
            home,
            lists,
            registry,
            plugins,
            collisions,
            roots,
            _packages: packages,
            _bundled: bundled_copy,
            workers,
        })
    }
}

fn note_collision(collisions: &mut Vec<ToolCollision>, previous: Option<Tool>, winner: &str) {
    if let Some(prev) = previous {
        collisions.push(ToolCollision {
            tool: prev.spec.name,
            winner: winner.to_string(),
            overridden: prev.spec.plugin,
        });
    }
}

/// Put a plugin's (or a direct caller's) contributions into the registry
/// and note them in its record.
fn apply_registrations(
    registrations: Vec<Registration>,
    owner: &str,
    record: &mut PluginRecord,
    registry: &mut Registry,
    collisions: &mut Vec<ToolCollision>,
) {
    for r in registrations {
        match r {
            Registration::Tool(t) => {
                record.tools.push(t.spec.name.clone());
                note_collision(collisions, registry.add_tool(t), owner);
            }
            Registration::Hook { event, name, entry } => {
                if !record.hooks.contains(&name) {
                    record.hooks.push(name.clone());
                }
                match event {
                    Some(e) => registry.add_hook(e, entry),
                    None => registry.hooks.add_unknown(&name, entry),
                }
            }
            Registration::Command(cmd) => {
                if crate::core::commands::answered_by_host(&cmd.name) {
                    tracing::warn!(
                        "'{owner}' registers '/{}', which the core command of that name shadows",
                        cmd.name
                    );
                }
                record.commands.push(cmd.name.clone());
                registry.add_command(cmd);
            }
            Registration::Skill(s) => {
                record.skills.push(s.name.clone());
                registry.add_skill(s);
            }
        }
    }
}

/// What plugin code outside any plugin package (the Python API's direct
/// registrations) sees as its home: the host built last.
///
/// Kept process-wide (an attribute of the interpreter's runtime module):
/// code outside every plugin package belongs to no host, so there is no
/// host to ask; each plugin package gets its own host's home when it is
/// imported.
fn set_default_home(home: &Path) {
    let _ = crate::runtime::try_attach(|py| {
        use pyo3::types::PyAnyMethods;
        let module = crate::runtime::runtime().module(py);
        if let Err(e) = module.setattr("HOME", home.to_string_lossy().as_ref()) {
            tracing::debug!("could not set the default home: {e}");
        }
    });
}

/// How isolated plugins are run: the builder's choices over the defaults.
/// A worker command that cannot be found is reported when a plugin loads.
fn isolation_settings(
    isolation: &crate::plugins::config::Isolation,
    command: Option<crate::isolation::WorkerCommand>,
    load_timeout: Option<std::time::Duration>,
    breaker: Option<(u32, std::time::Duration)>,
    python_log_level: u8,
) -> Result<crate::isolation::Settings, String> {
    use crate::isolation as iso;
    if *isolation == crate::plugins::config::Isolation::None {
        return Err("isolation is off".into());
    }
    let command = match command {
        Some(c) => c,
        None => iso::WorkerCommand::current_exe().map_err(|e| {
            format!("cannot find this program to start workers from ({e}); name one with HostBuilder::worker_command")
        })?,
    };
    let (breaker_crashes, breaker_window) =
        breaker.unwrap_or((iso::DEFAULT_BREAKER_CRASHES, iso::DEFAULT_BREAKER_WINDOW));
    Ok(iso::Settings {
        command,
        load_timeout: load_timeout.unwrap_or(iso::DEFAULT_LOAD_TIMEOUT),
        breaker_crashes,
        breaker_window,
        python_log_level,
    })
}

fn load_candidate(
    c: Candidate,
    (home, extensions, python): (&Path, &Arc<Extensions>, &Result<(), String>),
    isolate: Option<(
        &Result<crate::isolation::Settings, String>,
        crate::plugins::config::ResourceLimits,
    )>,
    registry: &mut Registry,
    collisions: &mut Vec<ToolCollision>,
    packages: &mut Vec<Box<dyn Send + Sync>>,
    workers: &mut Vec<crate::isolation::Supervisor>,
) -> PluginRecord {
    let manifest = c.manifest.as_ref().ok();
    let mut record = PluginRecord {
        key: c.key.clone(),
        name: manifest
            .map(|m| m.name.clone())
            .unwrap_or_else(|| c.key.clone()),
        version: manifest.map(|m| m.version.clone()).unwrap_or_default(),
        description: manifest.map(|m| m.description.clone()).unwrap_or_default(),
        author: manifest.map(|m| m.author.clone()).unwrap_or_default(),
        source: c.source,
        kind: manifest
            .map(|m| m.kind.as_str().to_string())
            .unwrap_or_else(|| "standalone".into()),
        enabled: c.enabled,
        status: if !c.enabled {
            if c.skip_reason == Some(crate::plugins::format::Verdict::Disabled) {
                PluginStatus::Disabled
            } else {
                PluginStatus::NotEnabled
            }
        } else if c.skip_reason.is_some() {
            use crate::plugins::manifest::PluginKind;
            if matches!(&c.manifest, Ok(m) if matches!(m.kind, PluginKind::Exclusive | PluginKind::Platform | PluginKind::ModelProvider))
            {
                PluginStatus::Skipped
            } else {
                PluginStatus::Failed
            }
        } else {
            PluginStatus::Loaded
        },
        loaded: false,
        error: c.skip_reason.as_ref().map(ToString::to_string),
        failure: None,
        dialect: Some(c.dialect),
        path: c.dir.clone(),
        tools: Vec::new(),
        hooks: Vec::new(),
        commands: Vec::new(),
        skills: Vec::new(),
        requires_env: manifest
            .map(|m| m.requires_env.iter().map(|r| r.name.clone()).collect())
            .unwrap_or_default(),
        provides_web_providers: manifest
            .map(|m| m.provides_web_providers.clone())
            .unwrap_or_default(),
        isolated: isolate.is_some(),
        entry: crate::dialects::by_id(c.dialect)
            .and_then(|d| d.entry_in(&c.key, &c.dir, extensions)),
        dependencies: crate::dialects::by_id(c.dialect)
            .map(|d| d.dependencies(&c.key, &c.dir))
            .unwrap_or_default(),
    };
    if !c.enabled || c.skip_reason.is_some() {
        if record.status == PluginStatus::Failed {
            tracing::warn!(
                "plugin '{}' cannot be loaded: {}",
                c.key,
                record.error.as_deref().unwrap_or_default()
            );
        }
        return record;
    }
    let Some(dialect) = crate::dialects::by_id(c.dialect) else {
        let message = format!("no dialect '{}' in this build", c.dialect);
        tracing::warn!("plugin '{}' cannot be loaded: {message}", c.key);
        record.error = Some(message);
        record.status = PluginStatus::Failed;
        return record;
    };
    let loaded = match isolate {
        None => match python {
            Ok(()) => dialect.load_in(&c.key, &c.dir, home, extensions),
            Err(no_python) => Err(PluginError::native(no_python.clone())),
        },
        Some((Err(problem), _)) => Err(PluginError::native(problem.clone())),
        Some((Ok(settings), limits)) => {
            let spec = crate::isolation::LoadSpec {
                key: c.key.clone(),
                dir: c.dir.clone(),
                home: home.to_path_buf(),
                dialect: dialect.name().to_string(),
                limits,
            };
            crate::isolation::load(spec, settings.clone()).map(|(registrations, worker)| {
                workers.push(worker);
                crate::dialects::LoadedPlugin {
                    registrations,
                    package: None,
                    hold: None,
                }
            })
        }
    };
    match loaded {
        Err(failure) => {
            let at = failure
                .location
                .as_deref()
                .map(|l| format!(" (at {l})"))
                .unwrap_or_default();
            tracing::warn!(
                "plugin '{}' failed to load and is disabled: {}{at}",
                c.key,
                failure.described()
            );
            if let Some(tb) = &failure.traceback {
                tracing::info!("traceback of plugin '{}':\n{}", c.key, tb.trim_end());
            }
            record.error = Some(failure.described());
            record.failure = Some(failure);
            record.status = PluginStatus::Failed;
        }
        Ok(loaded) => {
            apply_registrations(
                loaded.registrations,
                &c.key,
                &mut record,
                registry,
                collisions,
            );
            packages.extend(loaded.package.map(|p| Box::new(p) as Box<dyn Send + Sync>));
            packages.extend(loaded.hold);
            record.loaded = true;
            record.dialect = Some(dialect.id());
            tracing::debug!("plugin '{}' loaded from {}", c.key, c.dir.display());
        }
    }
    record
}

/// A running set of plugins and native contributions.
pub struct Host {
    /// What dialects and the agent keep per host ([`Extensions`]).
    extensions: Arc<Extensions>,
    home: PathBuf,
    lists: PluginLists,
    registry: Registry,
    plugins: Vec<PluginRecord>,
    collisions: Vec<ToolCollision>,
    roots: Vec<(Source, PathBuf)>,
    /// The plugins' Python packages (and dialects' holds on process-wide
    /// names): unloaded when the host goes away
    /// (after the registry, whose handlers refer into them).
    _packages: Vec<Box<dyn Send + Sync>>,
    /// Keeps a temporary copy of the bundled plugins (used when the cache
    /// cannot be written) on disk while the host lives.
    _bundled: Option<crate::plugins::bundled::Located>,
    /// The supervisors of the isolated plugins that loaded.
    workers: Vec<crate::isolation::Supervisor>,
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
    pub fn plugin_lists(&self) -> &PluginLists {
        &self.lists
    }

    /// The worker state of isolated plugin `key` (running, restarting,
    /// disabled by its breaker) and its crash counts; `None` when it is not
    /// an isolated plugin that loaded.
    pub fn worker_status(&self, key: &str) -> Option<crate::isolation::WorkerStatus> {
        self.workers
            .iter()
            .find(|w| w.key() == key)
            .map(|w| w.status())
    }

    /// Every discovered plugin, in load order.
    pub fn plugins(&self) -> &[PluginRecord] {
        &self.plugins
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Tool names registered more than once, and who won.
    pub fn collisions(&self) -> &[ToolCollision] {
        &self.collisions
    }

    /// The directories scanned for plugins, by source.
    pub fn roots(&self) -> &[(Source, PathBuf)] {
        &self.roots
    }

    /// Run one tool call through the whole pipeline (hooks included).
    pub async fn call_tool(&self, name: &str, args: Value, session_id: &str) -> ToolResult {
        dispatch::call_tool(&self.registry, name, args, session_id, "").await
    }

    /// Fire `event` with `payload`; returns the actions callbacks asked for.
    pub async fn fire(&self, event: HookEvent, payload: HookPayload<'_>) -> Vec<HookAction> {
        dispatch::fire(&self.registry, event, payload).await
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
        let Some(command) = self.registry.command(&name) else {
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
        if self.plugins.is_empty() {
            return "No plugins found.".into();
        }
        let mut lines = Vec::new();
        for p in &self.plugins {
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
        crate::core::commands::CommandTable::new(&self.registry)
            .help_text(crate::core::commands::Surface::Cli)
    }

    /// The text of skill `plugin:name`.
    pub fn skill(&self, qualified: &str) -> Result<String, SkillError> {
        let skill = self
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

/// Where the registry looks up a tool a plugin registered while running
/// (Codumentor's `agent.tool_registry`): each loaded dialect that has such
/// tools, in-process first, then the isolated workers of this home.
struct RuntimeToolSource {
    home: PathBuf,
    dialects: Vec<&'static dyn crate::dialects::Dialect>,
}

impl RuntimeToolSource {
    fn of(home: &Path, plugins: &[PluginRecord]) -> Option<RuntimeToolSource> {
        let mut dialects: Vec<&'static dyn crate::dialects::Dialect> = Vec::new();
        for id in plugins
            .iter()
            .filter(|p| p.loaded)
            .filter_map(|p| p.dialect)
        {
            if let Some(d) = crate::dialects::by_id(id).filter(|d| d.has_runtime_tools()) {
                if !dialects.iter().any(|known| known.id() == d.id()) {
                    dialects.push(d);
                }
            }
        }
        (!dialects.is_empty()).then(|| RuntimeToolSource {
            home: home.to_path_buf(),
            dialects,
        })
    }
}

impl crate::core::registry::RuntimeTools for RuntimeToolSource {
    fn tool(&self, name: &str) -> Option<Tool> {
        self.dialects
            .iter()
            .find_map(|d| d.runtime_tool(&self.home, name))
            .or_else(|| crate::isolation::proxy::runtime_tool(&self.home, name))
    }
}
