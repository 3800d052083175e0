//! One adapter per plugin API ("dialect"): its context object, calling
//! conventions, answer translation and compat Python modules, mapped onto
//! the core's registry, hook table and typed outcomes.
//!
//! Adding a dialect is a new module here (and its compat sources under
//! `python/`) plus a row in [`DIALECTS`]: the core (registry, dispatch,
//! hooks) and the host stay as they are.
//!
//! The contract is small: [`Dialect`] is what plughost asks of every
//! dialect (12 methods: identity, where its plugins are, loading, its
//! events). What only some dialects do (install detection, load order,
//! doctor sections, terminal commands, tools of their own, state carried
//! to workers, Python classes, …) is a small trait of its own in
//! [`abilities`], and [`Dialect::abilities`] says which of them a dialect
//! has: a struct of `Option`s, `None` for each it lacks.
//!
//! Why a method returning the abilities, rather than a row of the table
//! holding them beside the dialect: a dialect's module declares what it
//! can do next to where it does it, the table stays a plain list, and
//! every holder of a `&dyn Dialect` (the host's records, a supervisor, a
//! worker) reaches the abilities without a second look-up. The walks over
//! the table that the rest of plughost calls ([`builtin_tools`],
//! [`doctor_sections`], [`load_order`], [`choose`], …) live with their
//! ability's trait and are re-exported here.

pub mod abilities;
pub mod bundle;
pub mod codumentor;
pub mod felix;
pub mod flowly;
pub mod fresh;
pub mod hermes;
// --- iso-parity (issue 47) ---
pub mod host_calls;
pub mod platforms;
pub mod shared;
pub mod web_providers;

use std::path::Path;
use std::sync::Arc;

pub use abilities::{
    add_python_classes, builtin_tools, check_dependencies, choose, doctor_modules, doctor_sections,
    load_order, not_used, providers, sniff, sniff_why, Abilities, Carried, DependencyState,
    DoctorPlugin, DoctorSection, SessionState, TerminalError,
};

use crate::core::extensions::Extensions;
use crate::core::outcome::PluginError;
use crate::core::registry::Registration;
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::Candidate;
use crate::plugins::format::{DialectId, Formats, PluginFormat};
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

/// One plugin API: what plughost asks of every dialect (its identity,
/// where its plugins are, loading them, its events) and, through
/// [`Dialect::abilities`], what only some can do.
pub trait Dialect: Send + Sync + 'static {
    /// The API's identity (displayed as its name, `flowly`).
    fn id(&self) -> DialectId;
    /// The rules its plugins follow in plughost's own plugin directories
    /// and `plugins install`; `None` when it finds its plugins elsewhere.
    fn format(&self) -> Option<&'static dyn PluginFormat> {
        None
    }
    /// Plugins this dialect finds outside plughost's plugin directories
    /// (its own users' locations, entry points), tagged with its name and
    /// with enablement decided against `lists`. None by default.
    fn discover(&self, home: &Path, lists: &PluginLists) -> Vec<Candidate> {
        let _ = (home, lists);
        Vec::new()
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
        state: &Arc<Extensions>,
    ) -> Vec<Candidate> {
        let _ = (runtime, state);
        self.discover(home, lists)
    }
    /// What loading the plugin `key` at `dir` imports (`module:register`),
    /// for `plugins list`, as remembered in the host's `state`; `None` when
    /// the dialect has no such notion.
    fn entry_in(&self, key: &str, dir: &Path, state: &Arc<Extensions>) -> Option<String> {
        let _ = (key, dir, state);
        None
    }
    /// Import the plugin at `dir` for a host whose home is `home` and
    /// collect what it registers. On failure nothing of it stays loaded.
    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError>;
    /// [`load`](Self::load) for the host whose state is `state`: a dialect
    /// that keeps something per host (its plugins' contexts reach the
    /// host's agent, its CLI commands) keeps it there, never in a `static`.
    /// By default the state is not needed.
    fn load_in(
        &self,
        key: &str,
        dir: &Path,
        home: &Path,
        state: &Arc<Extensions>,
    ) -> Result<LoadedPlugin, PluginError> {
        let _ = state;
        self.load(key, dir, home)
    }
    /// The lanes this dialect brings to the loop's points: rows for the
    /// places its plugins need a policy no other lane there has
    /// (`src/dialects/<name>/lanes.rs`). The core fires what is subscribed.
    fn lanes(&self) -> &'static [&'static crate::core::hooks::Lane] {
        &[]
    }
    /// The rows of the events its plugins name that say more than the
    /// lane they fire on: how a failing callback counts
    /// ([`crate::core::hooks::EventRow`]). An isolated plugin's hooks are
    /// given the row of the name they registered by, as in-process ones.
    fn events(&self) -> &'static [crate::core::hooks::EventRow] {
        &[]
    }
    /// Why a subscription to `event` (a name as the plugin wrote it) will
    /// never be called in plughost, for `plugins doctor`; `None` when it
    /// fires. By default: the seed API's event names fire, others never do.
    fn never_fires(&self, event: &str) -> Option<&'static str> {
        seed_never_fires(event)
    }
    /// The dialect's part of the event reference (`docs/<name>-events.md`).
    fn reference(&self) -> Option<&'static crate::core::reference::DialectDoc> {
        None
    }
    /// What it can do beyond this contract ([`abilities`]): none by default.
    fn abilities(&self) -> Abilities<'_> {
        Abilities::default()
    }
}

impl dyn Dialect {
    /// The API's name (`flowly`), as users write it: its id's.
    pub fn name(&self) -> &'static str {
        self.id().as_str()
    }
}

/// [`Dialect::never_fires`] for a dialect whose plugins name the seed
/// API's events, as Flowly's rows spell them.
pub fn seed_never_fires(event: &str) -> Option<&'static str> {
    flowly::lanes::by_name(event)
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
                // Wrapper lanes (before/after pairs) are the core's own.
                assert_ne!(lane.form, LaneForm::Wrapper, "{}", lane.name);
                assert_eq!(super::event_by_name(lane.name), Some(lane.spec.event));
            }
        }
    }
}

/// What a dialect records for plugins loaded without a host
/// ([`Dialect::load`]): in a worker, its one plugin's (the worker reads its
/// messaging platforms back from it after the load).
pub fn hostless_state() -> &'static Arc<Extensions> {
    static STATE: std::sync::OnceLock<Arc<Extensions>> = std::sync::OnceLock::new();
    STATE.get_or_init(Default::default)
}
