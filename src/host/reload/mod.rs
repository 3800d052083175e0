//! Reload without restart: a host's plugins as one immutable
//! [`PluginSet`] behind an atomic pointer, and a reload that discovers
//! again and swaps in a new set.
//!
//! Why a set, and why each call pins one: a call (a tool call, a hook
//! firing, a command) takes the set in force when it starts and holds it
//! until it ends, so a reload never pulls a plugin out from under a call
//! that is running its code; the old set goes away when its last call
//! finishes, and only then are the plugins it alone held unloaded (Hermes
//! `on_unload` and `spawn_task` teardown, Felix's shutdown, isolated
//! workers stopped).
//!
//! A reload loads new and changed plugins first (a plugin is "changed"
//! when the files under its directory changed, or where it runs did) and
//! keeps the [`Unit`] of every unchanged one, so their Python state stays
//! as it is. A plugin whose new version fails to load keeps its old
//! version in the new set, and the failure is in the [`ReloadReport`].

mod assemble;
mod config;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

pub(in crate::host) use assemble::{assemble, copy, Inputs};
pub(in crate::host) use config::{changed_sections, fire_reloaded, read_config, stamp_of};
pub use report::{FailedReload, LoadedVersion, ReloadReport};

use super::load::apply_registrations;
use super::{PluginRecord, ToolCollision};
use crate::core::hooks::{HookEntry, HookEvent};
use crate::core::registry::{Command, Registration, Registry, Tool};
use crate::plugins::config::PluginLists;

/// One plugin as it was loaded: its contributions, the Python package or
/// worker they live in, and what it was loaded from. Shared by every set
/// that includes it; dropped (unloaded) with the last.
pub struct Unit {
    key: String,
    dir: PathBuf,
    stamp: u64,
    isolated: bool,
    /// Its record as loaded, contributions not yet noted.
    record: PluginRecord,
    loaded_at: SystemTime,
    /// Before the package and the worker: handlers refer into them.
    registrations: Vec<Registration>,
    worker: Option<crate::isolation::Supervisor>,
    _package: Vec<Box<dyn Send + Sync>>,
}

/// What the host keeps across reloads that discovery does not give: the
/// builder's native tools, commands and hooks, the MCP servers' tools, and
/// the direct registrations (the wheel's), re-applied to every set.
#[derive(Default)]
pub(in crate::host) struct Fixed {
    pub tools: Vec<Tool>,
    pub commands: Vec<Command>,
    pub hooks: Vec<(HookEvent, HookEntry)>,
    /// Owner and contributions applied after the plugins (MCP tools, then
    /// the direct registrations), so they win a collision as at build.
    pub after: Vec<(String, Vec<Registration>)>,
    pub hook_timeout: Option<std::time::Duration>,
    pub collision: Option<crate::core::registry::CollisionPolicy>,
}

/// The plugins a host runs at one moment, and the registry built of them.
pub struct PluginSet {
    pub(in crate::host) registry: Registry,
    pub(in crate::host) plugins: Vec<PluginRecord>,
    pub(in crate::host) collisions: Vec<ToolCollision>,
    pub(in crate::host) lists: PluginLists,
    pub(in crate::host) units: Vec<Arc<Unit>>,
    /// `config.json` as this set read it (to tell a reload's changed sections).
    pub(in crate::host) config: Value,
    /// Why the new version of a plugin kept at its old one failed, by key.
    pub(in crate::host) kept_old: Vec<(String, String)>,
    /// 0 for the set the host was built with, then one more per reload.
    pub generation: u64,
}

impl PluginSet {
    /// Apply contributions known only once this set's plugins have loaded
    /// (the MCP servers a bundle declares), as [`assemble`] applies
    /// [`Fixed::after`].
    pub(in crate::host) fn apply_after(
        &mut self,
        after: &[(String, Vec<Registration>)],
    ) -> Result<(), crate::host::HostError> {
        for (owner, registrations) in after {
            let mut record = PluginRecord::direct(owner);
            let copies = registrations.iter().map(copy).collect();
            apply_registrations(
                copies,
                owner,
                &mut record,
                &mut self.registry,
                &mut self.collisions,
            );
        }
        match self.registry.refused().first() {
            Some(refused) => Err(crate::host::HostError::Collision(refused.clone())),
            None => Ok(()),
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
    pub fn plugins(&self) -> &[PluginRecord] {
        &self.plugins
    }
    fn unit(&self, key: &str) -> Option<&Arc<Unit>> {
        self.units.iter().find(|u| u.key == key)
    }
    pub(in crate::host) fn worker_status(
        &self,
        key: &str,
    ) -> Option<crate::isolation::WorkerStatus> {
        self.unit(key)?.worker.as_ref().map(|w| w.status())
    }
    /// Each loaded plugin's version and when it was loaded (`plugins
    /// doctor` against a running server, `GET /admin/plugins`).
    pub fn versions(&self) -> Vec<LoadedVersion> {
        self.units
            .iter()
            .map(|u| LoadedVersion {
                key: u.key.clone(),
                version: u.record.version.clone(),
                loaded_at: report::rfc3339(u.loaded_at),
                isolated: u.isolated,
                new_version_failed: self
                    .kept_old
                    .iter()
                    .find(|(k, _)| *k == u.key)
                    .map(|(_, e)| e.clone()),
            })
            .collect()
    }
}
