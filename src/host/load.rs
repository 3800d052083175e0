//! Loading one plugin candidate into a host being built: its record, its
//! dialect's (or an isolated worker's) load, and its contributions put
//! into the registry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{PluginRecord, PluginStatus, ToolCollision};
use crate::core::extensions::Extensions;
use crate::core::outcome::PluginError;
use crate::core::registry::{Registration, Registry, Tool};
use crate::isolation::journal::Record;
use crate::plugins::discovery::Candidate;

mod handoff;

pub(super) fn note_collision(
    collisions: &mut Vec<ToolCollision>,
    previous: Option<Tool>,
    winner: &str,
) {
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
pub(super) fn apply_registrations(
    registrations: Vec<Registration>,
    owner: &str,
    record: &mut PluginRecord,
    registry: &mut Registry,
    collisions: &mut Vec<ToolCollision>,
) {
    for r in registrations {
        match r {
            Registration::Tool(t) => {
                let (name, plugin) = (t.spec.name.clone(), t.spec.plugin.clone());
                note_collision(collisions, registry.add_tool(t), owner);
                // Counted only when the registry kept it (a collision rule
                // may have turned it away, with a warning).
                let kept = registry
                    .tool(&name)
                    .is_some_and(|k| k.spec.plugin == plugin);
                if kept && !record.tools.contains(&name) {
                    record.tools.push(name);
                }
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
            Registration::Task(t) => registry.add_task(t),
            Registration::Observer(o) => registry.add_observer(o),
            Registration::Routes(r) => registry.add_routes(r),
            Registration::Authenticator(a) => registry.add_auth_mode(a),
            Registration::ModelProvider(p) => tracing::debug!("{owner}: {}", p.doctor_line()),
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn load_candidate(
    c: Candidate,
    (home, extensions, python, guard): (&Path, &Arc<Extensions>, &Result<(), String>, &CallGuard),
    isolate: Option<(
        &Result<crate::isolation::Settings, String>,
        crate::plugins::config::ResourceLimits,
    )>,
    registry: &mut Registry,
    collisions: &mut Vec<ToolCollision>,
    packages: &mut Vec<Box<dyn Send + Sync>>,
    workers: &mut Vec<crate::isolation::Supervisor>,
    // (a reload re-applies a unit's registrations to each new set)
    kept: &mut Vec<Registration>,
) -> PluginRecord {
    let mut record = record_of(&c, isolate.is_some(), extensions);
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
    // An isolated plugin's worker, kept only once the plugin is accepted:
    // dropped, it is stopped (a refused plugin's code goes on running nowhere).
    let mut started = None;
    let inputs = (home, extensions, python, guard);
    let loaded = load_with(&c, dialect, inputs, isolate, &mut started);
    // (plugins.strict_hooks: undeclared registrations refuse the plugin)
    let loaded = loaded.and_then(|l| {
        let manifest = c.manifest.as_ref().ok();
        match crate::plugins::install::risk::strict_refusal(home, manifest, &l.registrations) {
            Some(why) => Err(PluginError::native(why)),
            None => Ok(l),
        }
    });
    if loaded.is_ok() {
        if let (Some(_), Some(isolated)) = (&started, dialect.abilities().isolated) {
            isolated.beside_worker(&c.key, &c.dir, home, extensions);
        }
        workers.extend(started);
    }
    match loaded {
        Err(failure) => record_failure(&c.key, &mut record, failure),
        Ok(mut loaded) => {
            if isolate.is_none() {
                let third_party = c.source != crate::plugins::discovery::Source::Bundled;
                let fails_closed =
                    crate::isolation::guard::declares_guard(&c.key, c.source, &c.dir);
                guard.wrap(
                    &c.key,
                    (third_party, fails_closed),
                    &mut loaded.registrations,
                );
            }
            super::take_model_providers(&mut loaded.registrations, &extensions.get());
            kept.extend(loaded.registrations.iter().map(super::reload::copy));
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

/// Load `c` with `dialect`: in-process, or in a worker when `isolate` says
/// how (all of it: the main process never imports it). The worker goes into `started`, for the caller to keep
/// once it accepts the plugin.
#[allow(clippy::type_complexity)]
fn load_with(
    c: &Candidate,
    dialect: &'static dyn crate::dialects::Dialect,
    (home, extensions, python, guard): (&Path, &Arc<Extensions>, &Result<(), String>, &CallGuard),
    isolate: Option<(
        &Result<crate::isolation::Settings, String>,
        crate::plugins::config::ResourceLimits,
    )>,
    started: &mut Option<crate::isolation::Supervisor>,
) -> Result<crate::dialects::LoadedPlugin, PluginError> {
    match isolate {
        None => match python {
            Ok(()) => guard.load(&c.key, c.source, || {
                dialect.load_in(&c.key, &c.dir, home, extensions)
            }),
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
                guard: crate::isolation::guard::declares_guard(&c.key, c.source, &c.dir),
                host: crate::isolation::host_link::HostSide::new(
                    extensions,
                    &c.key,
                    dialect.name(),
                ),
            };
            // iso-parity: emitted events reach the worker before it unloads.
            let draining = spec.host.unload_guard();
            crate::isolation::load(spec, settings.clone()).map(|(registrations, worker)| {
                *started = Some(worker);
                crate::dialects::LoadedPlugin {
                    registrations,
                    package: None,
                    hold: draining.map(|d| Box::new(d) as Box<dyn Send + Sync>),
                }
            })
        }
    }
}

/// Mark plugin `key`'s `record` failed with `failure`, logged with where
/// it happened (its traceback at info level).
fn record_failure(key: &str, record: &mut PluginRecord, failure: PluginError) {
    let at = failure
        .location
        .as_deref()
        .map(|l| format!(" (at {l})"))
        .unwrap_or_default();
    tracing::warn!(
        "plugin '{key}' failed to load and is disabled: {}{at}",
        failure.described()
    );
    if let Some(tb) = &failure.traceback {
        tracing::info!("traceback of plugin '{key}':\n{}", tb.trim_end());
    }
    record.error = Some(failure.described());
    record.failure = Some(failure);
    record.status = PluginStatus::Failed;
}

/// Which plugins run isolated: what the builder or `plugins.isolate` says
/// (`explicit`), else, when `third_party` (the long-running hosts), every
/// plugin that is neither bundled nor `trusted`; and in any case every
/// plugin the crash journal caught taking plughost down (`crashed`).
pub(super) fn isolation_choice(
    explicit: Option<crate::plugins::config::Isolation>,
    third_party: bool,
    trusted: &[String],
    crashed: &[crate::isolation::journal::Crashed],
    candidates: &[Candidate],
) -> crate::plugins::config::Isolation {
    use crate::plugins::config::Isolation;
    use crate::plugins::discovery::Source;
    let base = match explicit {
        Some(i) => i,
        None if third_party => Isolation::Only(
            candidates
                .iter()
                .filter(|c| c.source != Source::Bundled && !trusted.contains(&c.key))
                .map(|c| c.key.clone())
                .collect(),
        ),
        None => Isolation::None,
    };
    let caught: Vec<String> = crashed
        .iter()
        .filter(|c| candidates.iter().any(|k| k.key == c.key) && !base.covers(&c.key))
        .map(|c| c.key.clone())
        .collect();
    for key in &caught {
        tracing::warn!(
            "plugin '{key}' runs isolated: it crashed plughost before (listed in {})",
            "crash-journal/isolated of the home"
        );
    }
    match base {
        Isolation::All => Isolation::All,
        Isolation::None if caught.is_empty() => Isolation::None,
        Isolation::None => Isolation::Only(caught),
        Isolation::Only(mut keys) => {
            keys.extend(caught);
            if keys.is_empty() {
                Isolation::None
            } else {
                Isolation::Only(keys)
            }
        }
    }
}

/// The record of candidate `c` before it loads: what its manifest says,
/// and its status as discovery left it.
fn record_of(c: &Candidate, isolated: bool, extensions: &Arc<Extensions>) -> PluginRecord {
    let manifest = c.manifest.as_ref().ok();
    PluginRecord {
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
        isolated,
        entry: crate::dialects::by_id(c.dialect)
            .and_then(|d| d.entry_in(&c.key, &c.dir, extensions)),
        dependencies: crate::dialects::by_id(c.dialect)
            .and_then(|d| d.abilities().load_order)
            .map(|o| o.dependencies(&c.key, &c.dir))
            .unwrap_or_default(),
    }
}

/// Where the registry looks up a tool a plugin registered while running
/// (Codumentor's `agent.tool_registry`): each loaded dialect that has such
/// tools, in-process first, then the isolated workers of this home.
pub(super) struct RuntimeToolSource {
    home: PathBuf,
    dialects: Vec<&'static dyn crate::dialects::Dialect>,
}

impl RuntimeToolSource {
    pub(super) fn of(home: &Path, plugins: &[PluginRecord]) -> Option<RuntimeToolSource> {
        let mut dialects: Vec<&'static dyn crate::dialects::Dialect> = Vec::new();
        for id in plugins
            .iter()
            .filter(|p| p.loaded)
            .filter_map(|p| p.dialect)
        {
            if let Some(d) =
                crate::dialects::by_id(id).filter(|d| d.abilities().running_tools.is_some())
            {
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
            .find_map(|d| d.abilities().running_tools?.runtime_tool(&self.home, name))
            .or_else(|| crate::isolation::proxy::runtime_tool(&self.home, name))
    }
}

/// What guards the calls into in-process plugins: the crash journal (for
/// third-party plugins) and the watchdog bounding sync hooks by the host's
/// hook timeout. Shared by every wrapped callback, so this process's
/// journal lives as long as the host's plugins do.
pub(super) struct CallGuard {
    journal: Arc<crate::isolation::journal::Lazy>,
    hook_timeout: Option<std::time::Duration>,
    load_timeout: std::time::Duration,
}

impl CallGuard {
    /// `load_timeout`: the builder's, else `plugins.load_timeout_seconds`,
    /// else [`crate::isolation::DEFAULT_LOAD_TIMEOUT`].
    pub(super) fn new(
        home: &Path,
        hook_timeout: Option<std::time::Duration>,
        load_timeout: Option<std::time::Duration>,
    ) -> CallGuard {
        let load_timeout = load_timeout
            .or_else(|| {
                crate::plugins::config::read_isolation_choice(home)
                    .ok()?
                    .load_timeout_seconds
                    .map(std::time::Duration::from_secs_f64)
            })
            .unwrap_or(crate::isolation::DEFAULT_LOAD_TIMEOUT);
        CallGuard {
            journal: Arc::new(crate::isolation::journal::Lazy::new(home)),
            hook_timeout,
            load_timeout,
        }
    }

    /// Run an in-process `register()` under the load deadline (past it a
    /// `TimeoutError` ends Python code still running, and the plugin fails
    /// saying why), journaled unless the plugin is bundled.
    fn load(
        &self,
        key: &str,
        source: crate::plugins::discovery::Source,
        f: impl FnOnce() -> Result<crate::dialects::LoadedPlugin, PluginError>,
    ) -> Result<crate::dialects::LoadedPlugin, PluginError> {
        let watch = crate::runtime::watchdog::watch(self.load_timeout);
        let loaded = if source == crate::plugins::discovery::Source::Bundled {
            f()
        } else {
            self.journal.around(key, "register()", f)
        };
        if watch.fired() && loaded.is_err() {
            return Err(PluginError::native(format!(
                "register() did not return within {} s (plugins.load_timeout_seconds); the plugin is abandoned",
                self.load_timeout.as_secs_f64()
            )));
        }
        loaded
    }

    /// Wrap the in-process registrations of plugin `key`: journaled when
    /// `journaled` (third-party), hooks watched when the host has a budget.
    /// `how`: (journaled, fails closed).
    fn wrap(&self, key: &str, how: (bool, bool), registrations: &mut [Registration]) {
        let (journaled, fails_closed) = how;
        let journal = journaled.then(|| self.journal.clone());
        if journal.is_none() && self.hook_timeout.is_none() && !fails_closed {
            return;
        }
        for r in registrations {
            match r {
                Registration::Hook { entry, event, name } => {
                    let inner = entry.callback.clone();
                    let run: Arc<dyn crate::core::hooks::HookCallback> = match &journal {
                        Some(journal) => Arc::new(JournaledHook {
                            inner: inner.clone(),
                            key: key.into(),
                            journal: journal.clone(),
                            record: event.map(|e| (e, Record::new(key, name))),
                        }),
                        None => inner.clone(),
                    };
                    entry.callback = Arc::new(GuardedHook {
                        inner,
                        key: key.into(),
                        journal: journal.clone(),
                        run,
                        limit: self.hook_timeout,
                        hand_off: journaled,
                        fails_closed,
                    });
                }
                Registration::Tool(tool) => {
                    if let Some(journal) = &journal {
                        let what = format!("tool '{}'", tool.spec.name);
                        tool.handler = Arc::new(JournaledTool {
                            inner: tool.handler.clone(),
                            calling: Record::new(key, &what),
                            checking: Record::new(key, "check_fn"),
                            journal: journal.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

/// A hook callback of an in-process plugin, journaled and bounded.
struct GuardedHook {
    inner: Arc<dyn crate::core::hooks::HookCallback>,
    key: Arc<str>,
    journal: Option<Arc<crate::isolation::journal::Lazy>>,
    /// `inner`, journaled when the plugin is third-party.
    run: Arc<dyn crate::core::hooks::HookCallback>,
    limit: Option<std::time::Duration>,
    /// Whether a bounded call is handed to a thread the caller can abandon
    /// (third-party code). A bundled plugin's hooks are plughost's own,
    /// written not to block (no network, locks taken without waiting):
    /// they run in place, watched (a `TimeoutError` past the limit), which
    /// saves the thread hand-off each way (≈50 µs a call on a busy 2-core
    /// machine, most of a chat request's cost with the defaults).
    hand_off: bool,
    /// A guard ([`crate::isolation::guard`]): its failures refuse.
    fails_closed: bool,
}

impl crate::core::hooks::HookCallback for GuardedHook {
    /// Under a limit, on a thread the caller can abandon at the deadline
    /// ([`handoff`]); in place when the caller holds the GIL (the runner
    /// could not take it), watched as far as bytecode boundaries allow.
    fn call(
        &self,
        event: crate::core::hooks::HookEvent,
        payload: crate::core::hooks::HookPayload<'_>,
    ) -> crate::core::hooks::HookReturn {
        // A native callback (no Python) has nothing to bound: in place.
        if self.inner.native(event) {
            return self.run.call(event, payload);
        }
        match self.limit {
            Some(limit) if self.hand_off && handoff::may_hand_off() => {
                handoff::call_bounded(limit, event, payload, self.run.clone(), || {
                    if let Some(journal) = &self.journal {
                        journal.abandoned();
                    }
                })
            }
            limit => {
                let _watch = limit.map(crate::runtime::watchdog::watch);
                self.run.call(event, payload)
            }
        }
    }
    fn fail_closed(
        &self,
        event: crate::core::hooks::HookEvent,
        error: &crate::core::hooks::HookError,
    ) -> Option<crate::core::hooks::HookAction> {
        self.inner.fail_closed(event, error).or_else(|| {
            self.fails_closed
                .then(|| crate::isolation::guard::refusal(&self.key, event, error))
                .flatten()
        })
    }
    fn row(&self) -> Option<&'static crate::core::hooks::EventRow> {
        self.inner.row()
    }
    fn event_name(&self, event: crate::core::hooks::HookEvent) -> Option<String> {
        self.inner.event_name(event)
    }
    /// The tools the wrapped callback declared: the pipeline's filter
    /// must see through the journal's wrapper.
    fn tools(&self) -> Option<&[String]> {
        self.inner.tools()
    }
    fn native(&self, event: crate::core::hooks::HookEvent) -> bool {
        self.inner.native(event)
    }
    fn execution(&self) -> Option<&dyn crate::core::pipeline::middleware::Execution> {
        self.inner.execution()
    }
}

/// A hook callback of an in-process third-party plugin, journaled while
/// its code runs.
struct JournaledHook {
    inner: Arc<dyn crate::core::hooks::HookCallback>,
    key: Arc<str>,
    journal: Arc<crate::isolation::journal::Lazy>,
    /// The record of the event it was registered for, made once.
    record: Option<(crate::core::hooks::HookEvent, Record)>,
}

impl crate::core::hooks::HookCallback for JournaledHook {
    fn call(
        &self,
        event: crate::core::hooks::HookEvent,
        payload: crate::core::hooks::HookPayload<'_>,
    ) -> crate::core::hooks::HookReturn {
        match &self.record {
            Some((made_for, record)) if *made_for == event => self
                .journal
                .around_record(record, || self.inner.call(event, payload)),
            _ => self
                .journal
                .around(&self.key, event.name(), || self.inner.call(event, payload)),
        }
    }
}

/// A tool of an in-process third-party plugin, journaled while its code
/// runs (the synchronous part; an async tool's own awaits are not).
struct JournaledTool {
    inner: Arc<dyn crate::core::registry::ToolHandler>,
    /// `key<TAB>tool <name>`: the call's record, made once.
    calling: Record,
    /// `key<TAB>check_fn`.
    checking: Record,
    journal: Arc<crate::isolation::journal::Lazy>,
}

impl crate::core::registry::ToolHandler for JournaledTool {
    fn check(&self) -> Option<Result<bool, PluginError>> {
        self.journal
            .around_record(&self.checking, || self.inner.check())
    }
    fn unavailability(&self) -> crate::core::outcome::Unavailability {
        self.inner.unavailability()
    }
    fn call(
        &self,
        ctx: &mut crate::core::contexts::ToolCallContext,
    ) -> crate::core::registry::ToolReturn {
        self.journal
            .around_record(&self.calling, || self.inner.call(ctx))
    }
    fn reads_rust_params(&self) -> bool {
        self.inner.reads_rust_params()
    }
    fn fatal(&self, error: &PluginError) -> bool {
        self.inner.fatal(error)
    }
}
