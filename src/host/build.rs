//! Building a host: discovery of its plugins, its registry and the order
//! they load in (each plugin's load is [`super::load`]'s).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Host, HostError};
use crate::core::extensions::Extensions;
use crate::core::hooks::{HookCallback, HookEntry, HookEvent, HookStats};
use crate::core::registry::{CollisionPolicy, Command, Registration, Tool, NATIVE_OWNER};
use crate::plugins::config;
use crate::plugins::discovery::{self, Source};

mod python;
pub(super) use python::start_python;

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
    /// Unset: the process's runtime, asked for when the build starts.
    runtime: Option<crate::runtime::Runtime>,
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
    isolate_third_party: bool,
    /// Start the interpreter during discovery even if no plugin is found.
    python_anyway: bool,
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

    /// The runtime the host runs its plugins on (default: the process's,
    /// [`Runtime::current`](crate::runtime::Runtime::current), or the one
    /// [`python_log_level`](Self::python_log_level) asks for);
    /// [`Runtime::none`](crate::runtime::Runtime::none) for a host of native
    /// parts that must never start CPython.
    pub fn runtime(mut self, runtime: &crate::runtime::Runtime) -> Self {
        self.runtime = Some(runtime.clone());
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
    /// The level Python `logging` is forwarded at (10 debug … 40 error;
    /// default: the runtime's, 30 unless it was started with another). A
    /// setting of the runtime, not of the host: without
    /// [`runtime`](Self::runtime), the process's runtime forwarding at
    /// `level` (started so if none runs); a runtime that forwards at
    /// another level fails the build ([`HostError::Runtime`]).
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
    /// Start the interpreter during discovery even when no plugin is found
    /// (the CLI: where to look for installed plugins is then read from its
    /// `sys.path` in-process, cheaper than the child process a library
    /// host of native parts reads it from). It starts while a helper
    /// thread reads the plugin directories, as it does whenever plugins
    /// are expected.
    pub(crate) fn start_python_anyway(mut self) -> Self {
        self.python_anyway = true;
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
    /// How long a plugin's `register()` may take (default 10 s, else
    /// `plugins.load_timeout_seconds`); past it an isolated plugin's worker
    /// is killed, an in-process one's Python code gets a `TimeoutError`,
    /// and the plugin is marked failed.
    pub fn isolation_load_timeout(mut self, limit: std::time::Duration) -> Self {
        self.isolation_load_timeout = Some(limit);
        self
    }
    /// Run third-party plugins (neither bundled nor in `plugins.trusted`)
    /// isolated when neither the builder nor `plugins.isolate` says
    /// otherwise: the policy of the long-running hosts (`serve`, `mcp`),
    /// which must outlive a plugin's crash (docs/reliability.md).
    pub fn isolate_third_party(mut self, on: bool) -> Self {
        self.isolate_third_party = on;
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
    pub fn build(mut self) -> Result<Host, HostError> {
        // Each plugin file read once for the whole build.
        let _view = crate::plugins::snapshot::Scope::enter();
        let home = config::resolve_home(self.home.as_deref());
        let lists = self.lists_of(&home)?;
        let extensions = Arc::new(Extensions::default());
        // The host's runtime, which its plugins (and `Host::runtime`) use.
        let runtime = self.resolved_runtime()?;
        extensions.get_or_init(|| runtime);
        // What a reload discovers and loads with (before discovery takes
        // the directories it was given).
        let mut again = self.config_copy();
        let Found {
            candidates,
            roots,
            bundled_copy,
        } = self.discover(&home, &lists, &extensions)?;
        again.bundled_dir = roots.first().map(|(_, dir)| dir.clone());
        let mut fixed = self.fixed_parts();
        let guard =
            super::load::CallGuard::new(&home, self.hook_timeout, self.isolation_load_timeout);
        let (mut set, _) = self.load_set(
            &home,
            &extensions,
            (candidates, lists),
            (&fixed, &guard),
            None,
        )?;
        // The MCP servers' tools: after the plugins, which may declare
        // servers of their own (a bundle's `mcp.json`). Kept in the fixed
        // parts, ahead of the direct registrations, for every reload.
        let mcp: Vec<(String, Vec<Registration>)> = crate::mcp_client::attach(&home, &extensions)?
            .into_iter()
            .map(|tool| (tool.spec.plugin.clone(), vec![Registration::Tool(tool)]))
            .collect();
        set.apply_after(&mcp)?;
        fixed.after.splice(0..0, mcp);
        Ok(Host {
            extensions,
            home,
            reloaded: tokio::sync::watch::channel(set.generation).0,
            current: arc_swap::ArcSwap::from_pointee(set),
            roots,
            reloader: std::sync::Mutex::new(Recipe {
                builder: again,
                fixed,
                guard,
            }),
            _bundled: bundled_copy,
        })
    }

    /// The runtime this host is built from (asked for once, then kept for
    /// its reloads): the builder's, else the process's; with the log level
    /// the builder asks for, if any.
    fn resolved_runtime(&mut self) -> Result<crate::runtime::Runtime, HostError> {
        use crate::runtime::{Runtime, RuntimeError};
        let runtime = match (self.runtime.take(), self.python_log_level) {
            (Some(rt), Some(level)) => match rt.settings() {
                Some(running) if running.log_level() != level => {
                    return Err(HostError::Runtime(RuntimeError::Mismatch {
                        running,
                        asked: running.python_log_level(level),
                    }))
                }
                _ => rt,
            },
            (Some(rt), None) => rt,
            (None, Some(level)) => Runtime::with_log_level(level)?,
            (None, None) => Runtime::current(),
        };
        self.runtime = Some(runtime.clone());
        Ok(runtime)
    }

    /// `plugins.enabled` / `plugins.disabled` of the home, with the
    /// builder's additions.
    fn lists_of(&self, home: &Path) -> Result<config::PluginLists, HostError> {
        let mut lists = config::read_plugin_lists(home)?;
        lists.enabled.extend(self.extra_enabled.iter().cloned());
        lists.disabled.extend(self.extra_disabled.iter().cloned());
        Ok(lists)
    }

    /// The builder's settings without its contributions: what discovery
    /// and loading read, kept for reloads.
    fn config_copy(&self) -> HostBuilder {
        HostBuilder {
            home: self.home.clone(),
            project_dir: self.project_dir.clone(),
            enable_project_plugins: self.enable_project_plugins,
            bundled_dir: self.bundled_dir.clone(),
            extra_enabled: self.extra_enabled.clone(),
            extra_disabled: self.extra_disabled.clone(),
            python_log_level: self.python_log_level,
            runtime: self.runtime.clone(),
            collision: self.collision,
            hook_timeout: self.hook_timeout,
            allow_missing_bundled: true,
            isolation: self.isolation.clone(),
            worker_command: self.worker_command.clone(),
            isolation_load_timeout: self.isolation_load_timeout,
            breaker: self.breaker,
            limits: self.limits.clone(),
            isolate_third_party: self.isolate_third_party,
            ..HostBuilder::default()
        }
    }

    /// The parts every plugin set has whatever plugins it loads: the
    /// builder's native tools, commands and hooks, the direct
    /// registrations (`build` adds the MCP servers' tools once the first
    /// set has loaded).
    fn fixed_parts(&mut self) -> super::reload::Fixed {
        super::reload::Fixed {
            tools: std::mem::take(&mut self.tools),
            commands: std::mem::take(&mut self.commands),
            hooks: std::mem::take(&mut self.hooks),
            after: std::mem::take(&mut self.direct),
            hook_timeout: self.hook_timeout,
            collision: self.collision,
        }
    }

    /// Load `candidates` as a plugin set (reusing `previous`'s unchanged
    /// plugins), starting Python if an in-process plugin needs it.
    #[allow(clippy::type_complexity)]
    fn load_set(
        &mut self,
        home: &Path,
        extensions: &Arc<Extensions>,
        (candidates, lists): (Vec<discovery::Candidate>, config::PluginLists),
        (fixed, guard): (&super::reload::Fixed, &super::load::CallGuard),
        previous: Option<&super::PluginSet>,
    ) -> Result<(super::PluginSet, super::ReloadReport), HostError> {
        let (isolation, settings, limits) = self.isolation_plan(home, &candidates)?;
        let needs_python = candidates
            .iter()
            .any(|c| c.enabled && c.skip_reason.is_none() && !isolation.covers(&c.key));
        let runtime = self.resolved_runtime()?;
        // Whether in-process plugins can run: without Python they fail to
        // load, saying why; a Python that does not start fails the build.
        // Isolated plugins need none here: all of them runs in a worker.
        // The shared environment (third-party plugins' dependencies, their
        // `.pth` files) goes on this process's path only for an in-process
        // third-party plugin: isolated ones have it in their workers.
        let third_party_here = candidates.iter().any(|c| {
            c.enabled
                && c.skip_reason.is_none()
                && !isolation.covers(&c.key)
                && c.source != crate::plugins::discovery::Source::Bundled
        });
        let python: Result<(), String> = if !runtime.has_python() {
            Err("this host was built from Runtime::none(), which runs no Python plugins".into())
        } else if !needs_python {
            Ok(())
        } else {
            start_python(home, &runtime, third_party_here)?;
            Ok(())
        };
        let inputs = super::reload::Inputs {
            home,
            extensions,
            python: &python,
            guard,
            isolation: &isolation,
            settings: &settings,
            limits: &limits,
            fixed,
            lists,
        };
        let _gc = crate::runtime::gc_paused();
        super::reload::assemble(candidates, inputs, previous)
    }

    /// Discover and load again for `host` (see [`super::reload`]).
    pub(super) fn reload_set(
        recipe: &Recipe,
        host: &Host,
    ) -> Result<(super::PluginSet, super::ReloadReport), HostError> {
        let _view = crate::plugins::snapshot::Scope::enter();
        let mut builder = recipe.builder.config_copy();
        let lists = builder.lists_of(&host.home)?;
        let found = builder.discover(&host.home, &lists, &host.extensions)?;
        let previous = host.current.load_full();
        builder.load_set(
            &host.home,
            &host.extensions,
            (found.candidates, lists),
            (&recipe.fixed, &recipe.guard),
            Some(&previous),
        )
    }

    /// Which plugins run isolated, how their workers are started, and
    /// their resource limits (a limit on an in-process plugin is warned
    /// about: it is not enforced).
    #[allow(clippy::type_complexity)]
    fn isolation_plan(
        &mut self,
        home: &Path,
        candidates: &[discovery::Candidate],
    ) -> Result<
        (
            config::Isolation,
            Result<crate::isolation::Settings, String>,
            config::LimitTable,
        ),
        HostError,
    > {
        // --- changed by rely: the default policy and the crash journal ---
        let choice = config::read_isolation_choice(home)?;
        let isolation = super::load::isolation_choice(
            self.isolation.take().or(choice.isolate),
            self.isolate_third_party,
            &choice.trusted,
            &crate::isolation::journal::quarantine(home),
            candidates,
        );
        // (a plugin in its own environment runs only in a worker on it)
        let isolation = crate::plugins::deps::own::isolate_own_envs(isolation, home);
        let load_timeout = self.isolation_load_timeout.or(choice
            .load_timeout_seconds
            .map(std::time::Duration::from_secs_f64));
        // A worker's interpreter forwards Python logging as this host's does.
        let level = self.resolved_runtime()?.log_level();
        let settings = isolation_settings(
            &isolation,
            self.worker_command.take(),
            load_timeout,
            self.breaker,
            level.or(self.python_log_level).unwrap_or(30),
        );
        let limits = match self.limits.take() {
            Some(l) => l,
            None => config::read_limits(home)?,
        };
        for key in limits.0.keys() {
            if key != "*" && !isolation.covers(key) {
                tracing::warn!(
                    "plugins.limits.{key} is not enforced: plugin '{key}' runs in-process (limits apply to isolated plugins; add it to plugins.isolate)"
                );
            }
        }
        Ok((isolation, settings, limits))
    }

    /// Every plugin this host may load: plughost's plugin directories
    /// (bundled, the home's, the project's when enabled), then what each
    /// dialect finds elsewhere, each with its dialect settled.
    fn discover(
        &mut self,
        home: &Path,
        lists: &config::PluginLists,
        extensions: &Arc<Extensions>,
    ) -> Result<Found, HostError> {
        let bundled = match self.bundled_dir.take() {
            Some(dir) => Ok(crate::plugins::bundled::Located::at(dir)),
            None => crate::plugins::bundled::locate(home),
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
            let project = self
                .project_dir
                .take()
                .unwrap_or_else(|| PathBuf::from("."));
            roots.push((Source::Project, project.join(".plughost").join("plugins")));
        }
        let seed = unavailable
            .as_ref()
            .map(|e| discovery::missing_bundled(e, lists, crate::dialects::formats()))
            .unwrap_or_default();
        // Plugins found will most likely start Python (any enabled by name,
        // or the bundled ones of the defaults): the interpreter starts on
        // this thread while a helper reads, parses and sniffs the plugin
        // directories (a third of `plugins list`'s own work with 100
        // plugins; the snapshot it filled is this build's from then on).
        // When the guess is wrong the interpreter started early, as it
        // would have for discovering any enabled plugin.
        let runtime = self.resolved_runtime()?;
        let overlap = runtime.would_initialize()
            && (self.python_anyway
                || !lists.enabled.is_empty()
                || bundled_expected(&roots[0].1, lists));
        let mut candidates = if overlap {
            discover_while(|| runtime.initialize_for_plugins(), seed, &roots, lists)
        } else {
            discovery::discover_after(seed, &roots, lists, crate::dialects::formats())
        };
        // A runtime without Python runs no dialect's discovery: none of
        // what it would find could load, and looking reads the interpreter's path.
        if runtime.has_python() {
            // Plugins found already will start Python: the dialects read
            // its path in-process. Without any, they read it without
            // starting the interpreter (a host of native parts never does).
            if self.python_anyway
                || candidates
                    .iter()
                    .any(|c| c.enabled && c.skip_reason.is_none())
            {
                runtime.initialize_for_plugins();
            }
            for dialect in crate::dialects::DIALECTS {
                for candidate in dialect.discover_in(home, lists, &runtime, extensions) {
                    discovery::admit(&mut candidates, candidate);
                }
            }
        }
        crate::dialects::choose(home, &mut candidates)?;
        if let Some(missing) = unavailable.and_then(|e| discovery::still_missing(e, &candidates)) {
            if !self.allow_missing_bundled {
                return Err(HostError::Bundled(missing));
            }
            tracing::error!("{missing}");
        }
        Ok(Found {
            candidates,
            roots,
            bundled_copy,
        })
    }
}

/// Whether the bundled root has a plugin directory `lists` does not
/// disable (by its directory name: a guess, from one listing the build
/// keeps): then the interpreter starts beside discovery. An empty or
/// missing root (a host of native parts, `bundled_dir` of an empty
/// directory) starts nothing.
fn bundled_expected(root: &Path, lists: &config::PluginLists) -> bool {
    use std::os::unix::ffi::OsStrExt;
    crate::plugins::snapshot::entries(root).is_ok_and(|entries| {
        entries.iter().any(|e| {
            !e.name.as_bytes().starts_with(b".")
                && !e.file_type.is_file()
                && e.name
                    .to_str()
                    .is_none_or(|n| !lists.disabled.iter().any(|d| d == n))
        })
    })
}

/// Discovery of `roots` (each candidate's dialect sniffed too, for
/// `dialects::choose`) on a helper thread while this one runs `meanwhile`;
/// what the helper read becomes this thread's snapshot. Inline when no
/// thread can be started.
fn discover_while(
    meanwhile: impl FnOnce(),
    seed: Vec<discovery::Candidate>,
    roots: &[(Source, PathBuf)],
    lists: &config::PluginLists,
) -> Vec<discovery::Candidate> {
    let formats = crate::dialects::formats();
    let seed = std::sync::Mutex::new(Some(seed));
    // The helper logs where this thread does (an embedder's scoped
    // subscriber included).
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    let span = tracing::Span::current();
    let look = || {
        tracing::dispatcher::with_default(&dispatch, || {
            let _span = span.enter();
            crate::plugins::snapshot::looking(|| {
                let seed = seed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .unwrap_or_default();
                let found = discovery::discover_after(seed, roots, lists, formats);
                for c in found.iter().filter(|c| c.dialect == formats.default_id()) {
                    crate::dialects::sniff_why(&c.dir);
                }
                // The files' metadata the reload stamp of each plugin that
                // will load reads (two `stat`s a plugin off the main thread).
                for c in found
                    .iter()
                    .filter(|c| c.enabled && c.skip_reason.is_none())
                {
                    crate::dialects::fresh::stamp_of(&c.dir);
                }
                found
            })
        })
    };
    let (found, looked) = std::thread::scope(|s| {
        let ahead = std::thread::Builder::new()
            .name("plughost-discovery".into())
            .spawn_scoped(s, look);
        meanwhile();
        match ahead {
            Ok(ahead) => ahead
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => {
                tracing::debug!("discovery runs inline (no helper thread: {e})");
                look()
            }
        }
    });
    crate::plugins::snapshot::adopt(looked);
    found
}

/// What a host reloads with: its builder's settings, the parts every set
/// has, and the guard of in-process calls (one crash journal per host).
pub(super) struct Recipe {
    builder: HostBuilder,
    fixed: super::reload::Fixed,
    guard: super::load::CallGuard,
}

/// What [`HostBuilder::discover`] found: the candidates, the plugin
/// directories looked in, and the bundled plugins' copy to keep.
struct Found {
    candidates: Vec<crate::plugins::discovery::Candidate>,
    roots: Vec<(Source, PathBuf)>,
    bundled_copy: Option<crate::plugins::bundled::Located>,
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
