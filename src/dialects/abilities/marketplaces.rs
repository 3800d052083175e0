//! Plugin marketplaces (Claude Code's `.claude-plugin/marketplace.json`):
//! a dialect whose plugins are published in marketplaces adds, lists,
//! updates and removes them for a home, and resolves `NAME@MARKETPLACE`
//! to an ordinary `plugins install` source. The CLI reaches it through
//! [`marketplaces`], naming no dialect; the texts are the dialect's.

use std::path::Path;

use super::super::DIALECTS;

/// A dialect that installs from marketplaces.
pub trait Marketplaces: Send + Sync {
    /// Add the marketplace at `source` (a directory or a git URL): what to print.
    fn add(&self, home: &Path, source: &str) -> Result<String, String>;
    /// The marketplaces added and their plugins (JSON when `json`).
    fn list(&self, home: &Path, json: bool) -> Result<String, String>;
    /// Read them again (pulling git ones): all, or `name`.
    fn update(&self, home: &Path, name: Option<&str>) -> Result<String, String>;
    /// Forget marketplace `name`.
    fn remove(&self, home: &Path, name: &str) -> Result<String, String>;
    /// `Some` when `spec` names a marketplace's plugin (`name@market`):
    /// the install source, and the commit to pin it at.
    fn resolve(&self, home: &Path, spec: &str) -> Option<Result<(String, Option<String>), String>>;
}

/// The dialect that has marketplaces, if any.
pub fn marketplaces() -> Option<&'static dyn Marketplaces> {
    DIALECTS.iter().find_map(|d| d.abilities().marketplaces)
}
