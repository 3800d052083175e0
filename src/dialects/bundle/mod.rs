//! Portable bundles: a directory with an Agent Plugins v1 `plugin.json`
//! (Hermes reads them: `hermes_cli/agent_plugins.py`). Declarative, no
//! Python: its `skills/<name>/SKILL.md` become the plugin's skills
//! (`<key>:<name>`), and the MCP servers of its `mcp.json` are started by
//! the host's MCP client (`crate::mcp_client`; a bundle that runs in a
//! worker has them started by the host too, confined as the worker is:
//! `Isolated::beside_worker`), their tools offered as the plugin's
//! (`mcp_<server>_<tool>`), with `${PLUGIN_ROOT}` and
//! `${PLUGIN_DATA}` replaced (the data directory is
//! `<home>/plugin-data/<key>`).
//!
//! A plugin directory is a bundle when its `plugin.json` declares the v1
//! schema ([`Sniff::sniff`]), or when `plugins.dialects.<key>` says
//! `bundle`. Enable it like any plugin (`plugins enable <key>`). The
//! Claude-Code layout v1 derives from (`.claude-plugin/plugin.json`,
//! `.mcp.json`, `${CLAUDE_PLUGIN_ROOT}`) is read as the same dialect where
//! it has the same shape, and its hooks, commands and agents run as
//! Claude Code runs them ([`claude`], [`hooks`], [`commands`], [`agents`],
//! on the lanes of [`lanes`]).

pub mod agents;
pub mod claude;
pub mod command_hook;
pub mod commands;
pub mod hooks;
pub mod lanes;
pub mod marketplace;
pub mod package;
pub mod session_context;
pub mod tool_names;
pub mod vars;

use std::path::Path;
use std::sync::Arc;

use crate::core::extensions::Extensions;
use crate::core::hooks::{HookEntry, Point};
use crate::core::outcome::PluginError;
use crate::core::registry::{Command, Registration, Skill};
use crate::plugins::config::DeclaredMcpServers;
use crate::plugins::discovery::Candidate;
use crate::plugins::format::{DialectId, PluginFormat, Verdict};
use crate::plugins::manifest::{DialectFields, Manifest, PluginKind};

use super::abilities::{Abilities, Sniff};
use super::{Dialect, LoadedPlugin};

pub const DIALECT: DialectId = DialectId::new("bundle");

/// The portable-bundle dialect.
pub struct Bundle;

/// Where bundle `key` of the host at `home` keeps its data (`${PLUGIN_DATA}`).
pub fn data_dir(home: &Path, key: &str) -> std::path::PathBuf {
    home.join("plugin-data").join(key)
}

/// The package at `dir`, in whichever of the two layouts it has.
fn load_package(dir: &Path, data: &Path, create_data: bool) -> Result<package::Package, String> {
    load_package_in(dir, data, create_data, None)
}

/// [`load_package`] for the host at `home` (its `config.json` has the
/// values of Claude Code plugins' `userConfig` options).
fn load_package_in(
    dir: &Path,
    data: &Path,
    create_data: bool,
    home: Option<&Path>,
) -> Result<package::Package, String> {
    if claude::is_claude(dir) {
        claude::load_in(dir, data, create_data, home)
    } else {
        package::load(dir, data, create_data)
    }
}

/// Where the manifest of the bundle at `dir` is.
fn manifest_path(dir: &Path) -> std::path::PathBuf {
    if claude::is_claude(dir) {
        dir.join(claude::MANIFEST)
    } else {
        dir.join("plugin.json")
    }
}

fn read(key: &str, dir: &Path, home: &Path) -> Result<package::Package, PluginError> {
    let package = load_package_in(dir, &data_dir(home, key), true, Some(home))
        .map_err(PluginError::native)?;
    for d in &package.diagnostics {
        tracing::warn!("bundle '{key}': {d} (left out)");
    }
    Ok(package)
}

fn skills_of(key: &str, package: &package::Package) -> Vec<Registration> {
    package
        .skills
        .iter()
        .map(|s| {
            Registration::Skill(Skill {
                name: format!("{key}:{}", s.name),
                plugin: key.to_string(),
                description: s.description.clone(),
                path: s.skill_md.clone(),
            })
        })
        .collect()
}

/// Everything the package contributes: its skills, and the Claude Code
/// layout's commands, hooks and agents (on their lanes).
fn registrations(
    key: &str,
    dir: &Path,
    home: &Path,
    package: &package::Package,
    state: Option<&Arc<Extensions>>,
) -> Vec<Registration> {
    let mut out = skills_of(key, package);
    let parts = &package.claude;
    let hook = |name: &str,
                label: String,
                event,
                priority,
                callback: Arc<dyn crate::core::hooks::HookCallback>| {
        Registration::Hook {
            event: Some(event),
            name: name.to_string(),
            entry: HookEntry {
                owner: key.to_string(),
                label,
                priority,
                callback,
                stats: Default::default(),
            },
        }
    };
    if !parts.commands.is_empty() {
        let commands: Vec<Arc<commands::PromptCommand>> =
            parts.commands.iter().cloned().map(Arc::new).collect();
        for c in &commands {
            out.push(Registration::Command(Command {
                name: c.name.clone(),
                description: c.description.clone(),
                args_hint: c.argument_hint.clone(),
                plugin: key.to_string(),
                handler: Arc::new(commands::PromptHandler(Arc::clone(c))),
            }));
        }
        let inbound = *Point::InboundMessage.lanes().last().expect("a lane");
        out.push(hook(
            COMMANDS_HOOK,
            format!("{key}: commands/*.md"),
            inbound,
            0,
            Arc::new(commands::Rewrite(commands)),
        ));
    }
    if !parts.agents.is_empty() {
        let agents = Arc::new(agents::Agents(parts.agents.clone()));
        for event in [
            crate::core::hooks::HookEvent::Lane(crate::core::hooks::LaneId(
                &agents::AGENTS_OFFERED,
            )),
            crate::core::hooks::HookEvent::Lane(crate::core::hooks::LaneId(&lanes::PRE_TOOL_USE)),
            Point::HistoryReady.lanes()[0],
        ] {
            // Before the plugin's hooks: they see the call as the agent makes it.
            out.push(hook(
                AGENTS_HOOK,
                format!("{key}: agents/*.md"),
                event,
                -1,
                Arc::new(Arc::clone(&agents)),
            ));
        }
    }
    // In a worker, SessionStart's context waits for the turn's history.
    let session_context = (state.is_none()
        && parts
            .hooks
            .iter()
            .any(|d| d.event == lanes::ClaudeEvent::SessionStart))
    .then(|| Arc::new(session_context::Pending::default()));
    if let Some(pending) = &session_context {
        out.push(hook(
            session_context::HOOK_NAME,
            format!("{key}: SessionStart context"),
            Point::HistoryReady.lanes()[0],
            // Before the plugin's UserPromptSubmit hooks, as in-process.
            -1,
            Arc::new(session_context::Deliver(Arc::clone(pending))),
        ));
    }
    for decl in &parts.hooks {
        let callback = Arc::new(command_hook::CommandHook {
            decl: decl.clone(),
            plugin: key.to_string(),
            root: dir.to_path_buf(),
            data: data_dir(home, key),
            options: parts.options.clone(),
            state: state.cloned(),
            session_context: session_context.clone(),
        });
        for event in decl.event.lanes() {
            out.push(hook(
                decl.event.name(),
                decl.command.clone(),
                event,
                0,
                Arc::new(Arc::clone(&callback)),
            ));
        }
    }
    out
}

/// The names the dialect's own callbacks are registered by.
const COMMANDS_HOOK: &str = "commands";
const AGENTS_HOOK: &str = "agents";

impl Dialect for Bundle {
    fn id(&self) -> DialectId {
        DIALECT
    }

    /// Without the host's state (an isolated plugin's worker): its skills,
    /// commands, hooks and agents; its MCP servers are the host's to start
    /// ([`Isolated::beside_worker`](super::abilities::Isolated::beside_worker)).
    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError> {
        let package = read(key, dir, home)?;
        Ok(LoadedPlugin {
            registrations: registrations(key, dir, home, &package, None),
            package: None,
            hold: None,
        })
    }

    fn load_in(
        &self,
        key: &str,
        dir: &Path,
        home: &Path,
        state: &Arc<Extensions>,
    ) -> Result<LoadedPlugin, PluginError> {
        let package = read(key, dir, home)?;
        let declared = state.get::<DeclaredMcpServers>();
        for mut server in package.servers.iter().cloned() {
            server.owner = key.to_string();
            declared.push(server);
        }
        Ok(LoadedPlugin {
            registrations: registrations(key, dir, home, &package, Some(state)),
            package: None,
            hold: None,
        })
    }

    fn lanes(&self) -> &'static [&'static crate::core::hooks::Lane] {
        lanes::LANES
    }

    /// Claude Code's hook events that fire in plughost (and the dialect's
    /// own callbacks for commands and agents).
    fn never_fires(&self, event: &str) -> Option<&'static str> {
        if event == COMMANDS_HOOK || event == AGENTS_HOOK || event == session_context::HOOK_NAME {
            return None;
        }
        lanes::ClaudeEvent::never_fires(event)
    }

    fn format(&self) -> Option<&'static dyn PluginFormat> {
        Some(&Bundle)
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            sniff: Some(self),
            marketplaces: Some(self),
            isolated: Some(self),
            ..Abilities::default()
        }
    }
}

impl super::abilities::Isolated for Bundle {
    /// An isolated bundle's MCP servers: started by the host's MCP client
    /// (its tools in the host's registry, its state in `plugins doctor`),
    /// each confined by the plugin's sandbox as its worker is. From the
    /// host rather than the worker so a server's start is bounded by its
    /// own `connect_timeout`, not the worker's load timeout, and a server
    /// that dies costs the worker nothing.
    fn beside_worker(&self, key: &str, dir: &Path, home: &Path, state: &Arc<Extensions>) {
        let package = match load_package_in(dir, &data_dir(home, key), true, Some(home)) {
            Ok(p) => p,
            Err(problem) => {
                tracing::warn!("bundle '{key}': its MCP servers cannot be read: {problem}");
                return;
            }
        };
        let declared = state.get::<DeclaredMcpServers>();
        for mut server in package.servers {
            server.owner = key.to_string();
            server.sandboxed = Some(crate::plugins::config::SandboxedAs {
                key: key.to_string(),
                dir: dir.to_path_buf(),
                dialect: DIALECT.as_str().to_string(),
            });
            declared.push(server);
        }
    }
}

impl Sniff for Bundle {
    fn sniff(&self, dir: &Path) -> Option<String> {
        if package::is_v1(dir) {
            return Some(
                "its plugin.json declares the Agent Plugins v1 schema (a portable bundle)".into(),
            );
        }
        claude::is_claude(dir).then(|| {
            format!(
                "it has a {} (a Claude-Code-layout bundle)",
                claude::MANIFEST
            )
        })
    }

    fn admit_sniffed(&self, c: &mut Candidate) {
        if c.missing {
            return;
        }
        let manifest_path = manifest_path(&c.dir);
        // Checked without making its data directory (loading does).
        let read = load_package(&c.dir, Path::new("${PLUGIN_DATA}"), false);
        match read {
            Ok(p) => {
                c.manifest = Ok(Manifest {
                    name: p.name,
                    version: p.version,
                    manifest_version: 1,
                    description: p.description,
                    author: p.author,
                    kind: PluginKind::Standalone,
                    requires_env: Vec::new(),
                    provides_tools: Vec::new(),
                    provides_hooks: Vec::new(),
                    provides_web_providers: Vec::new(),
                    dialect: DialectFields::default(),
                    path: manifest_path,
                    warnings: Vec::new(),
                });
                if matches!(c.skip_reason, Some(Verdict::Unloadable(_))) {
                    c.skip_reason = None;
                    // Discovery skipped the lock check of a directory it
                    // could not read: a user bundle is checked here.
                    crate::plugins::discovery::check_user_lock(c);
                }
            }
            Err(problem) => {
                if c.enabled && matches!(c.skip_reason, None | Some(Verdict::Unloadable(_))) {
                    c.skip_reason = Some(Verdict::Unloadable(problem.clone()));
                }
                c.manifest = Err(problem);
            }
        }
    }
}

impl PluginFormat for Bundle {
    fn id(&self) -> DialectId {
        DIALECT
    }

    /// Its manifest is the v1 `plugin.json`, which has no `dialect:`.
    fn named_by_manifest(&self) -> bool {
        false
    }

    /// Declarative: no `__init__.py`.
    fn layout_problem(&self, _m: &Manifest, _dir: &Path) -> Option<String> {
        None
    }

    /// A Claude Code plugin's `userConfig` options (v1 has none).
    fn user_options(&self, dir: &Path) -> Vec<crate::plugins::install::user_config::UserOption> {
        if claude::is_claude(dir) {
            claude::declared_options(dir)
        } else {
            Vec::new()
        }
    }

    /// `plugins install` of a bundle directory: its key and version are
    /// its v1 `plugin.json`'s (or `.claude-plugin/plugin.json`'s) `name`
    /// and `version`.
    fn without_manifest(&self, dir: &Path) -> Option<Result<(String, String), String>> {
        if !package::is_v1(dir) && !claude::is_claude(dir) {
            return None;
        }
        Some(load_package(dir, Path::new("${PLUGIN_DATA}"), false).map(|p| (p.name, p.version)))
    }
}
