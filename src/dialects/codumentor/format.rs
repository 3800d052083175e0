//! A Codumentor plugin directory: `dialect: codumentor` in its manifest,
//! `entry: "<module>:<Class>"`, and its code under `backend/`.

use std::path::Path;

use super::{layout_problem, Codumentor, DIALECT};
use crate::plugins::format::{DialectId, PluginFormat};
use crate::plugins::manifest::Manifest;

impl PluginFormat for Codumentor {
    fn id(&self) -> DialectId {
        DIALECT
    }

    fn entry_hint(&self) -> Option<&'static str> {
        Some("\"<module>:<Class>\", the plugin class under backend/")
    }

    /// Its code is the `backend/` package, not an `__init__.py` beside the
    /// manifest.
    fn layout_problem(&self, m: &Manifest, dir: &Path) -> Option<String> {
        layout_problem(m, dir)
    }
}
