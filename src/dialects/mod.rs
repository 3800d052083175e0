//! One adapter per plugin API ("dialect"): its context object, calling
//! conventions, answer translation and compat Python modules, mapped onto
//! the core's registry, hook table and typed outcomes.
//!
//! Adding a dialect is a new module here (and its compat sources under
//! `python/`) plus a row in [`DIALECTS`]: the core (registry, dispatch,
//! hooks) and the host stay as they are.

pub mod bundle;
pub mod codumentor;
pub mod felix;
pub mod flowly;
pub mod fresh;
pub mod hermes;
pub mod shared;

use std::path::Path;

use crate::core::outcome::PluginError;
use crate::core::registry::Registration;
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::Candidate;
use crate::plugins::format::{DialectId, Formats, PluginFormat, Verdict};
use crate::runtime::loader::PluginPackage;

/// What loading a plugin through a dialect gave.
pub struct LoadedPlugin {
    /// Its contributions, committed only because loading succeeded.
    pub registrations: Vec<Registration>,
    /// Its Python package; the host keeps it for as long as it lives.
    pub package: Option<PluginPackage>,
    /// Anything else the host keeps while it lives and drops with it (a
    /// dialect's claim on a process-wide name, released on drop).
    pub hold: Option<Box<dyn Send + Sync>>,
}

/// One plugin API.
pub trait Dialect: Send + Sync + 'static {
    /// The API's identity (displayed as its name, `flowly`).
    fn id(&self) -> DialectId;
    /// The API's name (`flowly`), as users write it.
    fn name(&self) -> &'static str {
        self.id().as_str()
    }
    /// Import the plugin at `dir` for a host whose home is `home` and
    /// collect what it registers. On failure nothing of it stays loaded.
    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError>;
    /// Where the dialect's modules come from (for `plugins doctor`), once loaded.
    fn origin(&self) -> Option<String> {
        None
    }
    /// How its tools' failed outcomes read, when not plughost's way (its
    /// tools carry it in-process; isolated ones get it from here).
    fn renderer(&self) -> Option<std::sync::Arc<dyn crate::core::outcome::Renderer>> {
        None
    }
    /// Plugins this dialect finds outside plughost's plugin directories
    /// (its own users' locations, entry points), tagged with its name and
    /// with enablement decided against `lists`. None by default.
    fn discover(&self, home: &Path, lists: &PluginLists) -> Vec<Candidate> {
        let _ = (home, lists);
        Vec::new()
    }
    /// What loading the plugin `key` at `dir` imports (`module:register`),
    /// for `plugins list`; `None` when the dialect has no such notion.
    fn entry(&self, key: &str, dir: &Path) -> Option<String> {
        let _ = (key, dir);
        None
    }
    /// The plugins `key` loads after, for `plugins list`. None by default.
    fn dependencies(&self, key: &str, dir: &Path) -> Vec<String> {
        let _ = (key, dir);
        Vec::new()
    }
    /// Why a subscription to `event` (a name as the plugin wrote it) will
    /// never be called in plughost, for `plugins doctor`; `None` when it
    /// fires. By default: the core's event names fire, others never do.
    fn never_fires(&self, event: &str) -> Option<&'static str> {
        core_never_fires(event)
    }
    /// The refusal a failed callback (named `label`) of this dialect stands
    /// for on `event` when its guards fail closed, for callbacks that run
    /// elsewhere (an isolated plugin's worker): the same answer its
    /// in-process callbacks give ([`crate::core::hooks::HookCallback::fail_closed`]).
    fn fail_closed(
        &self,
        label: &str,
        event: crate::core::hooks::HookEvent,
        error: &crate::core::hooks::HookError,
    ) -> Option<crate::core::hooks::HookAction> {
        let _ = (label, event, error);
        None
    }
    /// The rules its plugins follow in plughost's own plugin directories
    /// and `plugins install`; `None` when it finds its plugins elsewhere.
    fn format(&self) -> Option<&'static dyn PluginFormat> {
        None
    }
    /// Its per-turn state on a loop point's context that an isolated
    /// plugin's hook carries to its worker and back, as an opaque value
    /// (`None` inside when there is none yet), with where the worker's
    /// version goes back to; `None` when nothing crosses (the default).
    fn carry_out(&self, lc: &mut crate::core::hooks::LoopContext) -> Option<Carried> {
        let _ = lc;
        None
    }
    /// In a worker: put the state [`Dialect::carry_out`] sent on the
    /// rebuilt context.
    fn carry_in(&self, lc: &mut crate::core::hooks::LoopContext, state: serde_json::Value) {
        let _ = (lc, state);
    }
    /// In a worker: the state as the handler left it, for plughost.
    fn carry_left(&self, lc: &mut crate::core::hooks::LoopContext) -> Option<serde_json::Value> {
        let _ = lc;
        None
    }
    /// Whether its plugins register tools while running (looked up by
    /// name when a tool is not in the registry). Default: no.
    fn has_runtime_tools(&self) -> bool {
        false
    }
    /// The tool `name` one of its plugins registered while running in the
    /// host (or worker) at `home`.
    fn runtime_tool(&self, home: &Path, name: &str) -> Option<crate::core::registry::Tool> {
        let _ = (home, name);
        None
    }
    /// How the results of its tools that render their own read (a
    /// Rust renderer cannot cross from a worker: an isolated tool says it
    /// has one and plughost uses this). Default: [`Dialect::renderer`].
    fn own_renderer(&self) -> Option<std::sync::Arc<dyn crate::core::outcome::Renderer>> {
        self.renderer()
    }
    /// How such a tool's results read.
    fn runtime_tool_renderer(&self) -> Option<std::sync::Arc<dyn crate::core::outcome::Renderer>> {
        None
    }

    /// [`load`](Self::load) for the host whose state is `state`: a dialect
    /// that keeps something per host (its plugins' contexts reach the
    /// host's agent, its CLI commands) keeps it there, never in a `static`.
    /// By default the state is not needed.
    fn load_in(
        &self,
        key: &str,
        dir: &Path,
        home: &Path,
        state: &std::sync::Arc<crate::core::extensions::Extensions>,
    ) -> Result<LoadedPlugin, PluginError> {
        let _ = state;
        self.load(key, dir, home)
    }
    /// [`discover`](Self::discover) for a host built from `runtime`: a
    /// dialect finding installed distributions looks where the runtime's
    /// interpreter imports from ([`crate::runtime::Runtime::search_path`]).
    /// What it finds it may remember in the host's `state` for
    /// [`load_in`](Self::load_in) and [`entry_in`](Self::entry_in).
    fn discover_in(
        &self,
        home: &Path,
        lists: &PluginLists,
        runtime: &crate::runtime::Runtime,
        state: &std::sync::Arc<crate::core::extensions::Extensions>,
    ) -> Vec<Candidate> {
        let _ = (runtime, state);
        self.discover(home, lists)
    }
    /// [`entry`](Self::entry) for the host whose state is `state`.
    fn entry_in(
        &self,
        key: &str,
        dir: &Path,
        state: &std::sync::Arc<crate::core::extensions::Extensions>,
    ) -> Option<String> {
        let _ = state;
        self.entry(key, dir)
    }

    /// The lanes this dialect brings to the loop's points: rows for the
    /// places its plugins need a policy no other lane there has
    /// (`src/dialects/<name>/lanes.rs`). The core fires what is subscribed.
    fn lanes(&self) -> &'static [&'static crate::core::hooks::Lane] {
        &[]
    }
    /// The dialect's part of the event reference (`docs/<name>-events.md`).
    fn reference(&self) -> Option<&'static crate::core::reference::DialectDoc> {
        None
    }
    /// Why the plugin directory `dir`, which names no dialect, is one of
    /// this dialect's (what its files show), or `None`. Asked in table
    /// order for a plugin in plughost's own directories; the reason is what
    /// `plugins install` prints.
    fn sniff(&self, dir: &Path) -> Option<String> {
        let _ = dir;
        None
    }
    /// Tools the dialect itself offers the agents of the host at `home`,
    /// registered as `owner`'s (Flowly's `web_search` / `web_extract`,
    /// served by web backend plugins). None by default.
    fn builtin_tools(&self, home: &Path, owner: &str) -> Vec<crate::core::registry::Tool> {
        let _ = (home, owner);
        Vec::new()
    }
    /// Its own section of `plugins doctor` for the host at `home` whose
    /// plugins are `plugins` (Flowly's view of the web providers); `None`
    /// when it has none (the default).
    fn doctor_section(&self, home: &Path, plugins: &[DoctorPlugin<'_>]) -> Option<DoctorSection> {
        let _ = (home, plugins);
        None
    }
    /// The place of its `<name> modules: <origin>` line among the
    /// interpreter's lines of `plugins doctor` (lowest first); `None` when
    /// doctor does not show where its modules come from (the default).
    fn doctor_modules_rank(&self) -> Option<u8> {
        None
    }
    /// Whether `plugins doctor` lists its loaded plugins in the order they
    /// loaded (it orders them itself, [`Dialect::order`]). Default: no.
    fn shows_load_order(&self) -> bool {
        false
    }
    /// What its plugin `key` registered that this host does not use (for
    /// `plugins doctor`), as kept in the host's `state`. None by default.
    fn not_used(&self, state: &crate::core::extensions::Extensions, key: &str) -> Vec<String> {
        let _ = (state, key);
        Vec::new()
    }
    /// The terminal commands its plugins registered on the host whose state
    /// is `state` (`plughost <dialect> NAME`): `(name, help, plugin)`.
    fn terminal_commands(
        &self,
        state: &crate::core::extensions::Extensions,
    ) -> Vec<(String, String, String)> {
        let _ = state;
        Vec::new()
    }
    /// Run its terminal command `name`; `None` when the dialect has no
    /// terminal commands at all (the default), else the command's exit status.
    fn run_terminal_command(
        &self,
        state: &crate::core::extensions::Extensions,
        name: &str,
        args: &[String],
    ) -> Option<Result<u8, TerminalError>> {
        let _ = (state, name, args);
        None
    }
    /// The load order of `candidates` as this dialect wants its own plugins
    /// ordered (the others keep their places); `isolated(key)` says whether
    /// a plugin runs in a worker. By default they stay as they are.
    fn order(&self, candidates: Vec<Candidate>, isolated: &dyn Fn(&str) -> bool) -> Vec<Candidate> {
        let _ = isolated;
        candidates
    }
    /// Keep its candidate `c` out when a plugin it depends on did not load
    /// (`state_of(key)`: what became of the plugin `key` handled before it).
    /// By default `c` is returned as it is.
    fn check_dependencies(
        &self,
        c: Candidate,
        state_of: &dyn Fn(&str) -> Option<DependencyState>,
    ) -> Candidate {
        let _ = state_of;
        c
    }
    /// Add the Python classes its plugins and embedders use to the wheel's
    /// module `m` (Flowly's `PluginContext`). None by default.
    fn python_classes(&self, m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        let _ = m;
        Ok(())
    }

    /// Settle candidate `c`, just given to this dialect by its files
    /// ([`Dialect::sniff`]) or by `plugins.dialects`, whose manifest was
    /// read by the directory default's rules: a dialect whose plugins'
    /// manifests are their own (a bundle's v1 `plugin.json`) reads it again
    /// and says whether the plugin loads. By default `c` stays as it is.
    fn admit_sniffed(&self, c: &mut Candidate) {
        let _ = c;
    }

    /// The providers its plugin `key` registered on the host whose state is
    /// `state`, each with whether it is active (for `plugins doctor`).
    fn providers(&self, state: &crate::core::extensions::Extensions, key: &str) -> Vec<String> {
        let _ = (state, key);
        Vec::new()
    }

    /// Its per-session state that must outlive the process holding the
    /// session (a replica that dies): exported from a session's slots as
    /// JSON (`None`: nothing worth keeping) and imported back on the
    /// replica that resumes it. `None`: the dialect keeps none.
    fn session_state(&self) -> Option<SessionState> {
        None
    }
}

/// How a dialect's per-session state leaves and re-enters a session's
/// slots (see [`Dialect::session_state`]). `import` replaces the state in
/// the slots with the value (`{}`: with none); an isolated plugin's worker
/// is handed its session's state that way.
#[derive(Clone, Copy)]
pub struct SessionState {
    pub export: fn(&crate::core::hooks::Slots) -> Option<serde_json::Value>,
    pub import: fn(&crate::core::hooks::Slots, &serde_json::Value),
}

/// A dialect's per-turn state on its way to an isolated worker: the value
/// sent, and where the value that comes back is stored.
pub struct Carried {
    pub state: Option<serde_json::Value>,
    pub back: Box<dyn Fn(serde_json::Value) + Send + Sync>,
}

/// [`Dialect::never_fires`] for a dialect whose names are the core's
/// events (Flowly's, and callbacks registered from Rust).
pub fn core_never_fires(event: &str) -> Option<&'static str> {
    crate::core::hooks::HookEvent::from_name(event)
        .is_none()
        .then_some("not a known event: it never fires")
}

/// Every dialect this build knows, in the order they are asked. The first
/// is the API of a plugin directory whose manifest names none.
pub static DIALECTS: &[&dyn Dialect] = &[
    &flowly::Flowly,
    &hermes::Hermes,
    &felix::Felix,
    &codumentor::Codumentor,
    &bundle::Bundle,
];

/// The bus event a wire name stands for: a core event, a loop point, or a
/// lane of a dialect (what the isolation protocol carries by name).
pub fn event_by_name(name: &str) -> Option<crate::core::hooks::HookEvent> {
    crate::core::hooks::HookEvent::ALL
        .into_iter()
        .chain(loop_lanes_iter())
        .find(|e| e.name() == name)
}

/// Every loop lane: the core's loop points, then each dialect's lanes in
/// the dialect table's order.
pub fn loop_lanes() -> Vec<crate::core::hooks::HookEvent> {
    loop_lanes_iter().collect()
}

/// [`loop_lanes`] without collecting them (the isolation protocol looks
/// an event up by name on every hook call of a worker).
fn loop_lanes_iter() -> impl Iterator<Item = crate::core::hooks::HookEvent> {
    use crate::core::hooks::{HookEvent, LaneId};
    HookEvent::LOOP_POINTS.into_iter().chain(
        DIALECTS
            .iter()
            .flat_map(|d| d.lanes().iter())
            .map(|l| HookEvent::Lane(LaneId(l))),
    )
}

/// The dialect called `name` (as `config.json` or a user writes it).
pub fn by_name(name: &str) -> Option<&'static dyn Dialect> {
    DIALECTS.iter().copied().find(|d| d.name() == name)
}

/// The dialect `id` (a candidate's [`Candidate::dialect`]).
pub fn by_id(id: DialectId) -> Option<&'static dyn Dialect> {
    DIALECTS.iter().copied().find(|d| d.id() == id)
}

/// The plugin-directory rules of every dialect that has them, in table
/// order (the plugin layer asks them through this; it knows no dialect).
pub fn formats() -> Formats<'static> {
    static FORMATS: std::sync::LazyLock<Vec<&'static dyn PluginFormat>> =
        std::sync::LazyLock::new(|| DIALECTS.iter().filter_map(|d| d.format()).collect());
    Formats::new(&FORMATS)
}

/// Every plugin the dialects find outside plughost's plugin directories.
pub fn discover_all(home: &Path, lists: &PluginLists) -> Vec<Candidate> {
    DIALECTS
        .iter()
        .flat_map(|d| d.discover(home, lists))
        .collect()
}

/// Settle each candidate's dialect, in this order: an explicit
/// `plugins.dialects.<key>` of `config.json`; else its origin (a dialect's
/// own locations and entry points already tagged it); else what a plugin in
/// plughost's own directories shows ([`sniff`]); else `flowly`. A name this
/// build does not know leaves the plugin unloaded, saying which ones exist.
pub fn choose(
    home: &Path,
    candidates: &mut [Candidate],
) -> Result<(), crate::plugins::config::ConfigError> {
    let explicit = crate::plugins::config::read_dialects(home)?;
    for c in candidates.iter_mut() {
        if let Some(name) = explicit.get(&c.key) {
            match by_name(name) {
                Some(d) => {
                    c.dialect = d.id();
                    d.admit_sniffed(c);
                }
                None => {
                    let known: Vec<&str> = DIALECTS.iter().map(|d| d.name()).collect();
                    c.skip_reason = Some(Verdict::Unloadable(format!(
                        "plugins.dialects.{} in config.json names the dialect '{name}', which this build does not have (known: {}); fix it",
                        c.key,
                        known.join(", ")
                    )));
                }
            }
        } else if c.dialect == formats().default_id() {
            if let Some((d, why)) = sniff_why(&c.dir) {
                tracing::debug!("plugin '{}' is a {d} plugin: {why}", c.key);
                c.dialect = d;
                if let Some(dialect) = by_id(d) {
                    dialect.admit_sniffed(c);
                }
            }
        }
    }
    Ok(())
}

/// The dialect a plugin directory's own files show, and why
/// ([`Dialect::sniff`], asked in table order); `None`: nothing but the
/// default's conventions.
pub fn sniff_why(dir: &Path) -> Option<(DialectId, String)> {
    let look = || {
        DIALECTS
            .iter()
            .find_map(|d| d.sniff(dir).map(|why| (d.id(), why)))
    };
    // Once per build: the build's look-ahead thread sniffs while the
    // interpreter starts (`host::build`), and `choose` takes its answer.
    match dir.to_str() {
        Some(key) => crate::plugins::snapshot::derived("sniff", key, look),
        None => look(),
    }
}

/// The dialect a plugin directory's own files show ([`sniff_why`]).
pub fn sniff(dir: &Path) -> Option<DialectId> {
    sniff_why(dir).map(|(d, _)| d)
}

/// What became of a plugin handled before a dependent one (the host's
/// record of it, as far as a dependency check or a doctor section needs it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyState {
    Loaded,
    /// Disabled in config.
    Disabled,
    /// Not in the enabled list.
    NotEnabled,
    /// Failed (or was skipped), with its error when it has one.
    Failed(Option<String>),
}

/// A plugin as a dialect's [`Dialect::doctor_section`] sees it (the host's
/// record of it; the dialect layer does not know the host's types).
pub struct DoctorPlugin<'a> {
    pub key: &'a str,
    pub loaded: bool,
    /// Its status (`Failed` also for a skipped plugin).
    pub state: DependencyState,
    /// Its status as `plugins list` shows it (`failed`, `skipped`, …).
    pub status_text: &'static str,
    /// The web providers its manifest declares.
    pub provides_web_providers: &'a [String],
}

/// One dialect's section of `plugins doctor`: its key in the JSON report
/// and value there, and its lines in the text (`None`: no lines at all).
pub struct DoctorSection {
    pub key: &'static str,
    pub json: serde_json::Value,
    pub lines: Option<Vec<String>>,
}

/// Why a dialect's terminal command did not run: the name is unknown (a
/// usage error), or the command failed.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    #[error("{0}")]
    Unknown(String),
    #[error("{0}")]
    Failed(String),
}

/// Every dialect's built-in tools for the host at `home`, in table order.
pub fn builtin_tools(home: &Path, owner: &str) -> Vec<crate::core::registry::Tool> {
    DIALECTS
        .iter()
        .flat_map(|d| d.builtin_tools(home, owner))
        .collect()
}

/// Every dialect's section of `plugins doctor`, in table order.
pub fn doctor_sections(home: &Path, plugins: &[DoctorPlugin<'_>]) -> Vec<DoctorSection> {
    DIALECTS
        .iter()
        .filter_map(|d| d.doctor_section(home, plugins))
        .collect()
}

/// `(name, origin)` of every dialect whose modules `plugins doctor` shows,
/// in its order (`not loaded` when the dialect's modules are not loaded).
pub fn doctor_modules() -> Vec<(&'static str, String)> {
    let mut ranked: Vec<(u8, &'static str, String)> = DIALECTS
        .iter()
        .filter_map(|d| {
            let rank = d.doctor_modules_rank()?;
            Some((
                rank,
                d.name(),
                d.origin().unwrap_or_else(|| "not loaded".into()),
            ))
        })
        .collect();
    ranked.sort_by_key(|(rank, _, _)| *rank);
    ranked.into_iter().map(|(_, n, o)| (n, o)).collect()
}

/// What plugin `key` registered that this host does not use, by every dialect.
pub fn not_used(state: &crate::core::extensions::Extensions, key: &str) -> Vec<String> {
    DIALECTS
        .iter()
        .flat_map(|d| d.not_used(state, key))
        .collect()
}

/// `candidates` in load order: each dialect orders its own, in table order.
pub fn load_order(candidates: Vec<Candidate>, isolated: &dyn Fn(&str) -> bool) -> Vec<Candidate> {
    DIALECTS
        .iter()
        .fold(candidates, |c, d| d.order(c, isolated))
}

/// `c`, kept out when its dialect says a dependency of it did not load.
pub fn check_dependencies(
    c: Candidate,
    state_of: &dyn Fn(&str) -> Option<DependencyState>,
) -> Candidate {
    DIALECTS
        .iter()
        .fold(c, |c, d| d.check_dependencies(c, state_of))
}

/// Every dialect's Python classes, added to the wheel's module `m`.
pub fn add_python_classes(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    DIALECTS.iter().try_for_each(|d| d.python_classes(m))
}

/// The context object an embedder registers through directly (the wheel's
/// `Host.context`, `Host.register_tool`, …): the default dialect's.
pub type DirectContext = flowly::PluginContext;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_is_found_by_its_name_and_directory_plugins_have_one() {
        for dialect in DIALECTS {
            assert_eq!(
                by_name(dialect.name()).map(|d| d.name()),
                Some(dialect.name())
            );
        }
        assert_eq!(formats().default_id(), DIALECTS[0].id());
        assert!(by_id(formats().default_id()).is_some());
        assert!(by_name("no-such-api").is_none());
    }

    #[test]
    fn a_plugin_importing_hermes_modules_is_hermes() {
        let dir = tempfile::tempdir().unwrap();
        let sniffed = |text: &str| {
            std::fs::write(dir.path().join("__init__.py"), text).unwrap();
            sniff(dir.path())
        };
        assert_eq!(
            sniffed("from hermes_constants import get_hermes_home\n"),
            Some(hermes::discover::DIALECT)
        );
        assert_eq!(
            sniffed("import json\nfrom tools.registry import registry\n"),
            Some(hermes::discover::DIALECT)
        );
        assert_eq!(
            sniffed("    from hermes_cli.config import load_config\n"),
            Some(hermes::discover::DIALECT)
        );
        assert_eq!(sniffed("import hermes_constantsx\n"), None);
        assert_eq!(sniffed("# hermes_constants\nimport json\n"), None);
        assert_eq!(sniffed("from flowly.plugins import PluginContext\n"), None);
    }
}

#[cfg(test)]
mod lane_rows {
    use crate::core::hooks::{HookEvent, LaneForm};

    #[test]
    fn lane_names_are_unique_and_each_row_names_itself() {
        let mut names: Vec<&str> = HookEvent::ALL
            .iter()
            .chain(HookEvent::LOOP_POINTS.iter())
            .map(|e| e.name())
            .collect();
        for dialect in super::DIALECTS {
            for lane in dialect.lanes() {
                assert!(!names.contains(&lane.name), "{} twice", lane.name);
                names.push(lane.name);
                assert_eq!(lane.spec.event.name(), lane.name);
                assert_eq!(lane.spec.event.point(), lane.point);
                assert_eq!(lane.form, LaneForm::Plain, "{}", lane.name);
                assert_eq!(super::event_by_name(lane.name), Some(lane.spec.event));
            }
        }
    }
}

/// The providers plugin `key` registered, with their state, by every dialect.
pub fn providers(state: &crate::core::extensions::Extensions, key: &str) -> Vec<String> {
    DIALECTS
        .iter()
        .flat_map(|d| d.providers(state, key))
        .collect()
}
