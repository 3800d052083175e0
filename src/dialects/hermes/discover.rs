//! Where Hermes users keep plugins, and Hermes's enablement rules.
//!
//! Roots, later wins on a key collision (as in Hermes): the user's
//! `$HERMES_HOME/plugins/` (default `~/.hermes/plugins/`), then
//! `./.hermes/plugins/` when `HERMES_ENABLE_PROJECT_PLUGINS` is truthy.
//! Each is scanned two levels deep: `<root>/<plugin>/plugin.yaml` (key: the
//! manifest name, else the directory name) or, under a directory without a
//! manifest, `<root>/<category>/<plugin>/plugin.yaml` (key
//! `category/plugin`). A plugin loads when its key or manifest name is in
//! `plugins.enabled` of Hermes's `config.yaml` or of plughost's
//! `config.json`; `plugins.disabled` of either wins. Installed
//! distributions exposing `hermes_agent.plugins` follow (see
//! [`super::entry_point`]).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::manifest::{self, HermesKind};
use crate::plugins::config::{truthy, PluginLists};
use crate::plugins::discovery::{Candidate, Source};
use crate::plugins::format::{DialectId, Verdict};

/// The dialect's name, as candidates and `plugins list` show it.
pub const DIALECT: DialectId = DialectId::new("hermes");

/// Hermes's home: `$HERMES_HOME`, else `~/.hermes`.
pub fn hermes_home() -> PathBuf {
    crate::plugins::config::hermes_yaml::hermes_home()
}

/// `plugins.enabled` / `plugins.disabled` of `<hermes home>/config.yaml`.
/// A missing file has none; an unreadable or malformed one is warned about
/// (naming the file and the key) and contributes none, as in Hermes, which
/// then loads nothing it would have needed the list for.
pub fn read_config_lists(hermes_home: &Path) -> PluginLists {
    let path = hermes_home.join("config.yaml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return PluginLists::default(),
        Err(e) => {
            tracing::warn!(
                "cannot read {} ({e}); its plugins.enabled/disabled are ignored",
                path.display()
            );
            return PluginLists::default();
        }
    };
    parse_config_lists(&text, &path)
}

/// The plugin lists of a `config.yaml` text (`path` names it in warnings).
pub fn parse_config_lists(text: &str, path: &Path) -> PluginLists {
    if text.trim().is_empty() {
        return PluginLists::default();
    }
    let doc: Value = match serde_saphyr::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(
                "{} is not valid YAML ({e}); its plugins.enabled/disabled are ignored — fix it",
                path.display()
            );
            return PluginLists::default();
        }
    };
    let plugins = match doc.get("plugins") {
        None | Some(Value::Null) => return PluginLists::default(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            tracing::warn!(
                "{}: `plugins` must be a mapping with `enabled` and `disabled` lists; ignored",
                path.display()
            );
            return PluginLists::default();
        }
    };
    let list = |key: &str| -> Vec<String> {
        match plugins.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    other => {
                        tracing::warn!(
                            "{}: plugins.{key} has a non-name entry ({other}); ignored",
                            path.display()
                        );
                        None
                    }
                })
                .collect(),
            Some(_) => {
                tracing::warn!(
                    "{}: plugins.{key} must be a list of plugin names; ignored",
                    path.display()
                );
                Vec::new()
            }
        }
    };
    PluginLists {
        enabled: list("enabled"),
        disabled: list("disabled"),
    }
}

/// Every Hermes plugin under the Hermes roots, enablement decided against
/// `lists` (plughost's) and the Hermes home's `config.yaml`.
pub fn discover(lists: &PluginLists) -> Vec<Candidate> {
    if std::env::var("HERMES_SAFE_MODE").is_ok_and(|v| truthy(&v)) {
        tracing::info!("HERMES_SAFE_MODE is set: Hermes plugin discovery skipped");
        return Vec::new();
    }
    let home = hermes_home();
    let mut roots = vec![(Source::User, home.join("plugins"))];
    if std::env::var("HERMES_ENABLE_PROJECT_PLUGINS").is_ok_and(|v| truthy(&v)) {
        roots.push((Source::Project, PathBuf::from(".hermes").join("plugins")));
    }
    let yaml = read_config_lists(&home);
    let mut found: Vec<Candidate> = Vec::new();
    for (source, root) in roots {
        for (key, dir, manifest_path) in scan(&root) {
            let candidate = examine(source, key, &dir, &manifest_path, lists, &yaml);
            // Later roots win on a key collision, as in Hermes.
            found.retain(|c| c.key != candidate.key);
            found.push(candidate);
        }
    }
    // Entry points come last, as in Hermes (the host admits them by enablement).
    found.extend(super::entry_point::discover(lists, &yaml));
    found
}

/// `(key, plugin dir, manifest path)` under `root`, two levels deep.
pub fn scan(root: &Path) -> Vec<(String, PathBuf, PathBuf)> {
    let mut out = Vec::new();
    scan_level(root, None, &mut out);
    out
}

fn scan_level(dir: &Path, category: Option<&str>, out: &mut Vec<(String, PathBuf, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    children.sort();
    for child in children {
        let name = child
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match (manifest::find(&child), category) {
            (Some(path), None) => out.push((String::new(), child, path)),
            (Some(path), Some(cat)) => out.push((format!("{cat}/{name}"), child, path)),
            (None, None) => scan_level(&child, Some(&name), out),
            (None, Some(_)) => {
                tracing::debug!(
                    "skipping {} (no plugin.yaml, depth cap reached)",
                    child.display()
                )
            }
        }
    }
}

/// Why a plugin of Hermes kind `kind` is listed and not loaded: Hermes
/// loads platform and model-provider plugins through discoveries of their
/// own (a messaging gateway, its providers directory); `None` for the kinds
/// plughost loads (and for `exclusive`, which only a Hermes home refuses:
/// in plughost's directories a memory provider loads and says what it
/// registered that the host does not use).
pub fn unsupported_kind(kind: HermesKind) -> Option<String> {
    match kind {
        // Every kind loads: a platform's adapter runs under `serve`'s
        // gateway and its other registrations everywhere; a model
        // provider's profile becomes a model plughost can use
        // (`super::model_providers`).
        HermesKind::Standalone
        | HermesKind::Backend
        | HermesKind::Exclusive
        | HermesKind::Platform
        | HermesKind::ModelProvider => None,
    }
}

fn examine(
    source: Source,
    category_key: String,
    dir: &Path,
    manifest_path: &Path,
    lists: &PluginLists,
    yaml: &PluginLists,
) -> Candidate {
    let parsed = manifest::load(manifest_path, dir);
    let name = parsed
        .as_ref()
        .map(|m| m.manifest.name.clone())
        .unwrap_or_else(|_| {
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
    // A flat plugin's key is its name; a category plugin's is its path.
    let key = if category_key.is_empty() {
        name.clone()
    } else {
        category_key
    };
    let listed = |names: &[String]| names.iter().any(|n| *n == key || *n == name);
    let (enabled, mut skip_reason) = if listed(&lists.disabled) || listed(&yaml.disabled) {
        (false, Some(Verdict::Disabled))
    } else if listed(&lists.enabled) || listed(&yaml.enabled) {
        (true, None)
    } else {
        (
            false,
            Some(Verdict::NotEnabled(format!(
                "not enabled in config (add it to plugins.enabled of Hermes's config.yaml, or run: plughost plugins enable {key})"
            ))),
        )
    };
    if enabled {
        match &parsed {
            Err(e) => skip_reason = Some(Verdict::Unloadable(e.clone())),
            Ok(m) => {
                for w in &m.manifest.warnings {
                    tracing::warn!("Hermes plugin '{key}': {w}");
                }
                skip_reason = match m.kind {
                    HermesKind::Exclusive => Some(Verdict::Unsupported(
                        "exclusive plugin — Hermes activates it via <category>.provider config; plughost does not load exclusive plugins".into(),
                    )),
                    other => unsupported_kind(other).map(Verdict::Unsupported),
                };
                if skip_reason.is_none() && !dir.join("__init__.py").is_file() {
                    skip_reason = Some(Verdict::Unloadable(
                        "no __init__.py (a plugin needs one that defines register(ctx))".into(),
                    ));
                }
            }
        }
    }
    Candidate {
        key,
        source,
        dir: dir.to_path_buf(),
        manifest: parsed.map(|m| m.manifest),
        enabled,
        skip_reason,
        missing: false,
        dialect: DIALECT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_yaml_lists() {
        let p = Path::new("config.yaml");
        let l = parse_config_lists("plugins:\n  enabled: [a, b/c]\n  disabled: [d]\n", p);
        assert_eq!(l.enabled, vec!["a", "b/c"]);
        assert_eq!(l.disabled, vec!["d"]);
        assert_eq!(parse_config_lists("model: x\n", p), PluginLists::default());
        assert_eq!(parse_config_lists("plugins: [", p), PluginLists::default());
        assert_eq!(parse_config_lists("plugins: 3", p), PluginLists::default());
        let l = parse_config_lists("plugins:\n  enabled: [a, 3]\n  disabled: x\n", p);
        assert_eq!(l.enabled, vec!["a"]);
        assert!(l.disabled.is_empty());
    }
}
