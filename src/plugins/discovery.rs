//! Finding plugins: bundled, user and project sources, and who is enabled.
//!
//! Depth-1 scan of each source root (dot-directories skipped), sources in
//! order bundled → user → project. A directory's manifest may name its
//! plugin API (`dialect:`, one of the [`Formats`] the dialect table passes
//! in, whose rules say where its code lives); one that names none is of
//! the table's first API. Enablement follows the Flowly rules:
//! bundled plugins load unless disabled, user and project plugins only when
//! listed in `plugins.enabled`, and `plugins.disabled` overrides everything.
//! On a key collision enablement is decided first: a later plugin takes an
//! earlier one's place only when it is enabled (with a warning naming
//! both), so installing a plugin that merely shares `command-guard`'s name
//! cannot switch the bundled guard off. An enabled user plugin with an
//! entry in `<home>/plugins.lock.json` whose files changed since is not
//! loaded ([`Verdict::Changed`], see [`crate::plugins::lock`]).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plugins::bundled::BundledUnavailable;
use crate::plugins::config::PluginLists;
use crate::plugins::format::{DialectId, Formats, Verdict};
use crate::plugins::lock;
use crate::plugins::manifest::{self, Manifest, PluginKind};

/// Where a plugin was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Bundled,
    /// An installed distribution's entry point (a dialect's group:
    /// `felix.plugins`, `hermes_agent.plugins`).
    Entrypoint,
    User,
    Project,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Bundled => "bundled",
            Source::Entrypoint => "entrypoint",
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
    pub skip_reason: Option<Verdict>,
    /// A bundled plugin that could not be written to disk (see
    /// [`missing_bundled`]): listed, never loadable.
    pub missing: bool,
    /// The plugin API it is loaded through: in plughost's own plugin
    /// directories the one its manifest names, else the first of the
    /// [`Formats`]; a dialect that finds plugins elsewhere (its own
    /// locations, entry points) tags its candidates with its id.
    pub dialect: DialectId,
}

/// Scan `roots` (in order) and decide enablement against `lists`; the
/// manifests are read by the rules of `formats`.
pub fn discover(
    roots: &[(Source, PathBuf)],
    lists: &PluginLists,
    formats: Formats<'_>,
) -> Vec<Candidate> {
    discover_after(Vec::new(), roots, lists, formats)
}

/// [`discover`], starting from candidates already known (the bundled
/// plugins that could not be written out come first, as bundled ones do).
pub fn discover_after(
    mut found: Vec<Candidate>,
    roots: &[(Source, PathBuf)],
    lists: &PluginLists,
    formats: Formats<'_>,
) -> Vec<Candidate> {
    for (source, root) in roots {
        // User plugins are checked against the lock file beside their
        // directory (`<home>/plugins.lock.json`), read once per scan.
        let lock = (*source == Source::User)
            .then(|| lock::read_file(&lock::lock_path_for_user_root(root)));
        for dir in plugin_dirs(root) {
            let mut candidate = examine(*source, &dir, lists, formats);
            if let Some(lock) = &lock {
                check_lock(&mut candidate, lock);
            }
            settle(&mut found, candidate);
        }
    }
    found
}

/// Refuse an enabled user plugin whose files changed since its lock entry
/// ([`Verdict::Changed`]), or any enabled one while the lock file is
/// unreadable (nothing can be checked). A plugin without an entry, an
/// editable one, and one already refused for another reason are left as
/// they are.
fn check_lock(candidate: &mut Candidate, lock: &Result<lock::LockFile, lock::LockError>) {
    if !candidate.enabled || candidate.skip_reason.is_some() {
        return;
    }
    let lock = match lock {
        Ok(lock) => lock,
        Err(e) => {
            candidate.skip_reason = Some(Verdict::Unloadable(e.to_string()));
            return;
        }
    };
    let name = &candidate.key;
    candidate.skip_reason = match lock::check(lock.plugins.get(name), &candidate.dir) {
        lock::Check::Unlocked | lock::Check::Editable | lock::Check::Unchanged => None,
        lock::Check::Changed { drift, .. } => {
            Some(Verdict::Changed(lock::changed_message(name, &drift)))
        }
        lock::Check::Unreadable(e) => Some(Verdict::Changed(format!(
            "its files cannot be read to check them against plugins.lock.json: {e}"
        ))),
    };
}

/// Discovery's lock check for a user plugin whose check discovery skipped (it
/// refused the plugin then, and a dialect admits it after all), with the
/// lock file of its plugins directory.
pub fn check_user_lock(candidate: &mut Candidate) {
    if candidate.source != Source::User {
        return;
    }
    let Some(root) = candidate.dir.parent() else {
        return;
    };
    check_lock(
        candidate,
        &lock::read_file(&lock::lock_path_for_user_root(root)),
    );
}

/// Candidates for the bundled plugins `missing` names: listed with the
/// reason, enabled unless disabled, so a host sees what it lacks (of the
/// directory default API of `formats`).
pub fn missing_bundled(
    missing: &BundledUnavailable,
    lists: &PluginLists,
    formats: Formats<'_>,
) -> Vec<Candidate> {
    missing
        .names
        .iter()
        .map(|key| {
            let disabled = lists.disabled.contains(key);
            let reason = missing.reason();
            Candidate {
                key: key.clone(),
                source: Source::Bundled,
                dir: missing.cache.join(key),
                manifest: Err(reason.clone()),
                enabled: !disabled,
                skip_reason: Some(if disabled {
                    Verdict::Disabled
                } else {
                    Verdict::Unloadable(reason)
                }),
                missing: true,
                dialect: formats.default_id(),
            }
        })
        .collect()
}

/// `missing`, narrowed to the plugins still missing among `candidates`
/// (enabled, and not replaced by an enabled plugin of the same key); `None`
/// when that leaves none.
pub fn still_missing(
    mut missing: BundledUnavailable,
    candidates: &[Candidate],
) -> Option<BundledUnavailable> {
    missing.names = candidates
        .iter()
        .filter(|c| c.missing && c.enabled)
        .map(|c| c.key.clone())
        .collect();
    (!missing.names.is_empty()).then_some(missing)
}

/// Add `candidate` to `found`, settling a key collision. An enabled
/// candidate takes the place of every earlier one with its key, with a
/// warning when it displaces an enabled one. One that is not enabled never
/// displaces an enabled one: it is listed beside it, saying what enabling
/// it would do. Between candidates that are not enabled the later is kept.
/// Add `candidate` to `found`, deciding a key collision by enablement.
/// A dialect's candidate in a user plugin directory (a Felix source tree
/// under `<home>/plugins/`) is first checked against the lock file beside
/// that directory, as the ones [`discover_after`] finds are.
pub fn admit(found: &mut Vec<Candidate>, mut candidate: Candidate) {
    if candidate.source == Source::User && candidate.enabled && candidate.skip_reason.is_none() {
        if let Some(root) = candidate.dir.parent() {
            let lock = lock::read_file(&lock::lock_path_for_user_root(root));
            check_lock(&mut candidate, &lock);
        }
    }
    settle(found, candidate);
}

/// [`admit`] without the lock check (already done).
fn settle(found: &mut Vec<Candidate>, mut candidate: Candidate) {
    let key = candidate.key.clone();
    let active = found.iter().position(|c| c.key == key && c.enabled);
    match active {
        Some(at) if candidate.enabled => {
            let old = &found[at];
            tracing::warn!(
                "{} plugin '{key}' ({}) replaces the {} plugin '{key}' ({}) because it is enabled; disable it to get the {} one back",
                candidate.source.as_str(),
                candidate.dir.display(),
                old.source.as_str(),
                old.dir.display(),
                old.source.as_str(),
            );
        }
        Some(at) => {
            let old = &found[at];
            tracing::info!(
                "{} plugin '{key}' ({}) is not enabled and does not replace the {} one ({})",
                candidate.source.as_str(),
                candidate.dir.display(),
                old.source.as_str(),
                old.dir.display(),
            );
            candidate.skip_reason = candidate.skip_reason.take().map(|v| {
                v.noting(&format!(
                    "enabling it replaces the {} plugin '{key}'",
                    old.source.as_str()
                ))
            });
            found.retain(|c| c.key != key || c.enabled);
            found.push(candidate);
            return;
        }
        None => {
            if let Some(old) = found.iter().find(|c| c.key == key) {
                tracing::info!(
                    "plugin '{key}' from {} ({}) replaces the one from {} ({})",
                    candidate.source.as_str(),
                    candidate.dir.display(),
                    old.source.as_str(),
                    old.dir.display()
                );
            }
        }
    }
    found.retain(|c| c.key != key);
    found.push(candidate);
}

/// Sub-directories of `root` that look like plugins, sorted by name.
fn plugin_dirs(root: &Path) -> Vec<PathBuf> {
    use crate::plugins::snapshot;
    let Ok(entries) = snapshot::entries(root) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| !e.name.to_string_lossy().starts_with('.'))
        .map(|e| root.join(&e.name))
        .filter(|p| snapshot::is_dir(p))
        .filter(|p| {
            manifest::find_manifest(p).is_some() || snapshot::is_file(&p.join("__init__.py"))
        })
        .collect()
}

fn examine(source: Source, dir: &Path, lists: &PluginLists, formats: Formats<'_>) -> Candidate {
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let manifest = manifest::load_with(dir, formats).map_err(|e| e.to_string());
    let key = manifest
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or(dir_name);
    let (enabled, mut skip_reason) = if lists.disabled.contains(&key) {
        (false, Some(Verdict::Disabled))
    } else if source == Source::Bundled || lists.enabled.contains(&key) {
        (true, None)
    } else {
        // Enabling is suggested only for a plugin not known to be broken.
        let why = match &manifest {
            Err(e) => {
                format!("not in plugins.enabled, and it cannot load as it is: {e}; fix that first")
            }
            Ok(m) if m.kind == PluginKind::Exclusive => format!(
                "not in plugins.enabled, and kind={} is not supported yet",
                m.kind.as_str()
            ),
            Ok(_) => format!("not in plugins.enabled (run: plughost plugins enable {key})"),
        };
        (false, Some(Verdict::NotEnabled(why)))
    };
    if enabled {
        match &manifest {
            Err(e) => skip_reason = Some(Verdict::Unloadable(e.clone())),
            // `backend` plugins (web providers) load like `standalone` ones.
            Ok(m) if m.kind == PluginKind::Exclusive => {
                skip_reason = Some(Verdict::Unsupported(format!(
                    "kind={} is not supported yet",
                    m.kind.as_str()
                )))
            }
            Ok(m) => {
                for w in &m.warnings {
                    tracing::warn!("plugin '{key}': {w}");
                }
                skip_reason = formats
                    .of(m)
                    .layout_problem(m, dir)
                    .map(Verdict::Unloadable);
            }
        }
    }
    let dialect = match &manifest {
        Ok(m) => formats.of(m).id(),
        _ => formats.default_id(),
    };
    Candidate {
        key,
        source,
        dir: dir.to_path_buf(),
        manifest,
        enabled,
        skip_reason,
        missing: false,
        dialect,
    }
}
