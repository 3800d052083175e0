//! The rules Hermes adds to plughost's own plugin directories and to
//! `plugins install` (added by b5, issue 22): only its manifest versions.
//! Hermes reads `manifest_version` up to 2 and loads a newer one with a
//! warning (`SUPPORTED_MANIFEST_VERSION`, `hermes_cli/plugins_manifest.py`;
//! the warning is [`super::manifest`]'s). Not named by a manifest's
//! `dialect:` (a Hermes plugin is found by its code, [`super::sniff`]), so
//! nothing else of the directory rules changes.

use std::path::Path;

use crate::plugins::format::{DialectId, PluginFormat};

/// Hermes's directory-plugin rules.
pub struct HermesFormat;

impl PluginFormat for HermesFormat {
    fn id(&self) -> DialectId {
        super::discover::DIALECT
    }

    /// Hermes plugins carry no `dialect:`.
    fn named_by_manifest(&self) -> bool {
        false
    }

    /// Hermes's layout is Flowly's (an `__init__.py` beside the manifest).
    fn layout_problem(&self, m: &crate::plugins::manifest::Manifest, dir: &Path) -> Option<String> {
        let _ = m;
        (!dir.join("__init__.py").is_file())
            .then(|| "no __init__.py (a plugin needs one that defines register(ctx))".into())
    }

    /// Any version from 1 up, when the plugin's code is Hermes's (its
    /// manifest alone does not say: Flowly's manifests have the field too).
    fn reads_manifest_version(&self, version: i64, dir: &Path) -> bool {
        version >= 1 && super::sniff::code_evidence(dir).is_some()
    }
}
