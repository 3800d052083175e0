//! One adapter per plugin API ("dialect"): its context object, calling
//! conventions, answer translation and compat Python modules, mapped onto
//! the core's registry, hook table and typed outcomes.
//!
//! Adding a dialect is a new module here (and its compat sources under
//! `python/`) plus a row in [`DIALECTS`]: the core (registry, dispatch,
//! hooks) and the host stay as they are.

pub mod codumentor;
pub mod felix;
pub mod flowly;
pub mod hermes;
pub mod shared;

use std::path::Path;

use crate::config::PluginLists;
use crate::discovery::Candidate;
use crate::outcome::PluginError;
use crate::registry::Registration;
use crate::runtime::loader::PluginPackage;

/// What loading a plugin through a dialect gave.
pub struct LoadedPlugin {
    /// Its contributions, committed only because loading succeeded.
    pub registrations: Vec<Registration>,
    /// Its Python package; the host keeps it for as long as it lives.
    pub package: Option<PluginPackage>,
}

/// One plugin API.
pub trait Dialect: Send + Sync + 'static {
    /// The API's name (`flowly`).
    fn name(&self) -> &'static str;
    /// Import the plugin at `dir` for a host whose home is `home` and
    /// collect what it registers. On failure nothing of it stays loaded.
    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError>;
    /// Where the dialect's modules come from (for `plugins doctor`), once loaded.
    fn origin(&self) -> Option<String> {
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
}

/// Every dialect this build knows, in the order they are asked.
pub static DIALECTS: &[&dyn Dialect] = &[
    &flowly::Flowly,
    &hermes::Hermes,
    &felix::Felix,
    &codumentor::Codumentor,
];

/// The dialect called `name` (a candidate's [`Candidate::dialect`]).
pub fn by_name(name: &str) -> Option<&'static dyn Dialect> {
    DIALECTS.iter().copied().find(|d| d.name() == name)
}

/// Every plugin the dialects find outside plughost's plugin directories.
pub fn discover_all(home: &Path, lists: &PluginLists) -> Vec<Candidate> {
    DIALECTS
        .iter()
        .flat_map(|d| d.discover(home, lists))
        .collect()
}

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
        assert!(by_name(crate::discovery::DIRECTORY_DIALECT).is_some());
        assert!(by_name("no-such-api").is_none());
    }
}
