//! Felix in plughost's plugin directories: a source tree with no manifest
//! whose `pyproject.toml` declares `felix.plugins` entry points (found by
//! [`super::discover`], installed by `plugins install` under its first key).

use std::path::Path;

use super::discover::{read_pyproject, DIALECT};
use super::Felix;
use crate::plugins::format::{DialectId, PluginFormat};

impl PluginFormat for Felix {
    fn id(&self) -> DialectId {
        DIALECT
    }

    /// A manifest never names Felix: its plugins have none.
    fn named_by_manifest(&self) -> bool {
        false
    }

    fn without_manifest(&self, dir: &Path) -> Option<Result<(String, String), String>> {
        if !dir.join("pyproject.toml").is_file() {
            return None;
        }
        Some(match read_pyproject(dir) {
            Ok(p) => match p.entries.first() {
                Some((key, _)) => Ok((key.clone(), p.version.clone())),
                None => Err("no manifest (plugin.yaml, plugin.yml or plugin.json), and its pyproject.toml declares no [project.entry-points.\"felix.plugins\"]".into()),
            },
            Err(problem) => Err(problem),
        })
    }
}
