//! One adapter per plugin API ("dialect"): its context object, calling
//! conventions, answer translation and compat Python modules, mapped onto
//! the core's registry, hook table and typed outcomes.
//!
//! Adding a dialect is a new module here (and its compat sources under
//! `python/`) plus a row in [`DIALECTS`]: the core (registry, dispatch,
//! hooks) and the host stay as they are.

pub mod flowly;

use std::path::Path;

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
}

/// Every dialect this build knows, in the order they are asked.
pub static DIALECTS: &[&dyn Dialect] = &[&flowly::Flowly];

/// The dialect that loads plugins from plughost's plugin directories.
pub fn for_directory_plugin() -> &'static dyn Dialect {
    &flowly::Flowly
}
