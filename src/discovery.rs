//! Finding plugins: bundled, user and project sources, and who is enabled.
//!
//! Depth-1 scan of each source root (dot-directories skipped), sources in
//! order bundled → user → project, and the last writer wins on a key
//! collision. Enablement follows the Flowly rules: bundled plugins load
//! unless disabled, user and project plugins only when listed in
//! `plugins.enabled`, and `plugins.disabled` overrides everything.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::PluginLists;
use crate::manifest::{self, Manifest, PluginKind};

/// Where a plugin was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Bundled,
    User,
    Project,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Bundled => "bundled",
            Source::User => "user",
            Source::Project => "project",
        }
    }
}

/// A plugin directory found by the scan, with its enablement decision.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The manifest name, else the directory name.
    pub key: String,
    pub source: Source,
    pub dir: PathBuf,
    /// The manifest, or why it could not be used.
    pub manifest: Result<Manifest, String>,
    /// Whether the enablement rules select it.
    pub enabled: bool,
    /// Why it will not be loaded, when that is already known.
    pub skip_reason: Option<String>,
}

/// Scan `roots` (in order) and decide enablement against `lists`.
pub fn discover(roots: &[(Source, PathBuf)], lists: &PluginLists) -> Vec<Candidate> {
    let mut found: Vec<Candidate> = Vec::new();
    for (source, root) in roots {
        for dir in plugin_dirs(root) {
            let candidate = examine(*source, &dir, lists);
            if let Some(at) = found.iter().position(|c| c.key == candidate.key) {
                tracing::info!(
                    "plugin '{}' from {} ({}) replaces the one from {} ({})",
                    candidate.key,
                    candidate.source.as_str(),
                    candidate.dir.display(),
                    found[at].source.as_str(),
                    found[at].dir.display()
                );
                found.remove(at);
            }
            found.push(candidate);
        }
    }
    found
}

/// Sub-directories of `root` that look like plugins, sorted by name.
fn plugin_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| manifest::find_manifest(p).is_some() || p.join("__init__.py").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn examine(source: Source, dir: &Path, lists: &PluginLists) -> Candidate {
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let manifest = manifest::load(dir).map_err(|e| e.to_string());
    let key = manifest
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or(dir_name);
    let (enabled, mut skip_reason) = if lists.disabled.contains(&key) {
        (false, Some("disabled in config".to_string()))
    } else if source == Source::Bundled || lists.enabled.contains(&key) {
        (true, None)
    } else {
        (
            false,
            Some(format!(
                "not in plugins.enabled (run: plughost plugins enable {key})"
            )),
        )
    };
    if enabled {
        match &manifest {
            Err(e) => skip_reason = Some(e.clone()),
            Ok(m) if m.kind != PluginKind::Standalone => {
                skip_reason = Some(format!("kind={} is not supported yet", m.kind.as_str()))
            }
            Ok(m) => {
                for w in &m.warnings {
                    tracing::warn!("plugin '{key}': {w}");
                }
                if !dir.join("__init__.py").is_file() {
                    skip_reason = Some(
                        "no __init__.py (a plugin needs one that defines register(ctx))".into(),
                    );
                }
            }
        }
    }
    Candidate {
        key,
        source,
        dir: dir.to_path_buf(),
        manifest,
        enabled,
        skip_reason,
    }
}
