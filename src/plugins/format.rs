//! What the plugin layer asks of the plugin APIs ("dialects") without
//! knowing any of them: their typed identity, the rules a plugin directory
//! of theirs follows ([`PluginFormat`]), and why a found plugin is not
//! loaded ([`Verdict`]).
//!
//! The dialects sit above this layer: each one implements [`PluginFormat`]
//! in its own folder and the dialect table hands the set of them
//! ([`Formats`]) to discovery, manifest parsing and install. A new dialect
//! is therefore a new folder and a row in the table, never an edit here.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::plugins::manifest::Manifest;

/// A plugin API's identity (`flowly`, `hermes`, …): compared as a value,
/// displayed and serialised as its name (the name in `plugins list --json`
/// and in `plugins.dialects` of `config.json`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DialectId(&'static str);

impl DialectId {
    /// The id named `name`; each dialect declares its own once, as a const.
    pub const fn new(name: &'static str) -> DialectId {
        DialectId(name)
    }

    /// Its name, as users write it.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for DialectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Debug for DialectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl Serialize for DialectId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

/// The text of [`Verdict::Disabled`].
const DISABLED: &str = "disabled in config";

/// Why a found plugin will not be loaded. Code decides on the variant; the
/// text (its `Display`, each API wording its own) is what users read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Listed in a `disabled` list (`plugins.disabled`, a dialect's own).
    Disabled,
    /// Not selected by the enablement rules; the text says how to enable it.
    NotEnabled(String),
    /// Its kind is one plughost does not load.
    Unsupported(String),
    /// Enabled, but it cannot be loaded: its manifest, its layout, a
    /// dependency, a bundled plugin that could not be written out, …
    Unloadable(String),
    /// Installed with a lock entry, and its files changed since
    /// (`plugins.lock.json`): not loaded until `plugins accept NAME`. The
    /// text names the changed files and that command.
    Changed(String),
    /// Another verdict, with a note on what enabling the plugin would do
    /// to a plugin of the same key (`text` is the whole sentence).
    Shadowing { verdict: Box<Verdict>, text: String },
}

impl Verdict {
    /// This verdict followed by `; {note}`.
    pub fn noting(self, note: &str) -> Verdict {
        let text = format!("{self}; {note}");
        let verdict = match self {
            Verdict::Shadowing { verdict, .. } => verdict,
            other => Box::new(other),
        };
        Verdict::Shadowing { verdict, text }
    }

    /// The text users read.
    pub fn as_str(&self) -> &str {
        match self {
            Verdict::Disabled => DISABLED,
            Verdict::NotEnabled(t)
            | Verdict::Unsupported(t)
            | Verdict::Unloadable(t)
            | Verdict::Changed(t) => t,
            Verdict::Shadowing { text, .. } => text,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reading a verdict as text (`candidate.skip_reason.as_deref()`), as the
/// users of [`crate::plugins::discovery::Candidate`] did when it was a
/// `String`: only for showing and matching it in tests, never to decide.
impl std::ops::Deref for Verdict {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<&str> for Verdict {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The rules a plugin API adds to plughost's own plugin directories
/// (bundled, user, project) and to `plugins install`. Every method but
/// [`PluginFormat::id`] has the Flowly layout's answer as its default.
pub trait PluginFormat: Send + Sync {
    /// The API this format's plugins load through.
    fn id(&self) -> DialectId;
    /// Whether a manifest's `dialect:` may name it (a directory plugin of
    /// this API has a manifest). Default: yes.
    fn named_by_manifest(&self) -> bool {
        true
    }
    /// When its manifests must name the class to load (`entry`, with
    /// `dependencies`, `priority` and `args` beside it): what `entry` is,
    /// for the error when it is missing. Default: its manifests have none.
    fn entry_hint(&self) -> Option<&'static str> {
        None
    }
    /// Why `dir`, holding manifest `m` of this API, is not a loadable
    /// plugin. Default: its code is an `__init__.py` beside the manifest.
    fn layout_problem(&self, m: &Manifest, dir: &Path) -> Option<String> {
        let _ = m;
        (!dir.join("__init__.py").is_file())
            .then(|| "no __init__.py (a plugin needs one that defines register(ctx))".into())
    }
    /// For `plugins install` of a directory with no manifest: the key and
    /// version its own project files declare, or why they cannot be used;
    /// `None` when the directory is not of this API's kind. Default: none.
    fn without_manifest(&self, dir: &Path) -> Option<Result<(String, String), String>> {
        let _ = dir;
        None
    }
    /// The options the plugin at `dir` declares for the user to set (a
    /// Claude Code plugin's `userConfig`), which `plugins install` asks
    /// for. Default: none.
    fn user_options(&self, dir: &Path) -> Vec<crate::plugins::install::user_config::UserOption> {
        let _ = dir;
        Vec::new()
    }
    /// Whether the plugin at `dir` is of this API and its manifest's
    /// `manifest_version` (above plughost's own maximum) is one this API
    /// reads: Hermes reads 2 and loads a newer one with a warning.
    /// Default: no.
    fn reads_manifest_version(&self, version: i64, dir: &Path) -> bool {
        let _ = (version, dir);
        false
    }
}

/// The formats of every dialect of this build, in the dialect table's
/// order; the first is the API of a directory plugin whose manifest names
/// none.
#[derive(Clone, Copy)]
pub struct Formats<'a> {
    rows: &'a [&'a dyn PluginFormat],
}

impl<'a> Formats<'a> {
    /// `rows` in table order (not empty: the first is the default).
    pub fn new(rows: &'a [&'a dyn PluginFormat]) -> Formats<'a> {
        assert!(
            !rows.is_empty(),
            "the directory default is the first format"
        );
        Formats { rows }
    }

    /// The API of a directory plugin whose manifest names none.
    pub fn default_id(&self) -> DialectId {
        self.rows[0].id()
    }

    /// The formats a manifest's `dialect:` may name, in order.
    pub fn named(&self) -> impl Iterator<Item = &'a dyn PluginFormat> + '_ {
        self.rows.iter().copied().filter(|f| f.named_by_manifest())
    }

    /// The format a manifest's `dialect:` value `name` selects.
    pub fn by_manifest_name(&self, name: &str) -> Option<&'a dyn PluginFormat> {
        self.named().find(|f| f.id().as_str() == name)
    }

    /// The format of a parsed manifest (its `dialect:`, else the default).
    pub fn of(&self, m: &Manifest) -> &'a dyn PluginFormat {
        m.dialect
            .name
            .as_deref()
            .and_then(|n| self.by_manifest_name(n))
            .unwrap_or(self.rows[0])
    }

    /// Every format, in order.
    pub fn all(&self) -> impl Iterator<Item = &'a dyn PluginFormat> + '_ {
        self.rows.iter().copied()
    }
}
