//! The Hermes Agent plugin API: Hermes's plugin locations and enablement
//! ([`discover`]), its `PluginContext` ([`context`]), its calling and
//! answer conventions for tools ([`handlers`], [`render`]) and hooks
//! ([`hooks`]), and the compat `hermes_constants` module plugins import,
//! served by a finder consulted last so a real Hermes always wins.

mod abilities;
pub mod browser;
pub mod browser_cdp;
pub mod browser_tools;
pub mod cli;
pub mod context;
pub mod context_engine;
pub mod discover;
pub mod entry_point;
pub mod format;
pub mod gates;
pub mod handlers;
pub mod hooks;
pub mod lanes;
pub mod link;
pub mod manifest;
pub mod mcp;
pub mod members;
pub mod memory;
pub mod middleware;
pub mod model_providers;
pub mod order;
pub mod platform;
pub mod provider_tools;
pub mod providers;
mod python_fns;
pub mod reference;
pub mod remote;
pub mod render;
pub mod shim;
pub mod sniff;
pub mod tool_names;
pub mod valid_hooks;
pub mod verify;

use std::path::Path;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

pub use context::HermesContext;

use super::abilities::Abilities;
use super::{Dialect, LoadedPlugin};
use crate::core::extensions::Extensions;
use crate::core::outcome::PluginError;
use crate::dialects::shared::registered;
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::Candidate;
use crate::runtime::loader::PluginPackage;
use crate::runtime::{attach, module_from_source, plugin_error};

/// The finder serving the compat modules.
const FINDER_SOURCE: &str = include_str!("../../../python/plughost/_compat/hermes/__init__.py");

/// The parts of the current `PluginContext` kept in Python ([`context`]
/// hands them out): teardown, events, state, settings.
const CTX_SOURCE: &str = include_str!("../../../python/plughost/_compat/hermes/_ctx.py");

/// The compat Hermes modules: (module, source, is a package). Only what
/// real plugins import: the Hermes home, config and plugin types, the tool
/// registry and its JSON helpers, the provider and platform base classes.
macro_rules! compat {
    ($(($name:literal, $file:literal, $package:literal)),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../../python/plughost/_compat/hermes/", $file)), $package)),*]
    };
}
#[rustfmt::skip] // one line per module
const COMPAT_MODULES: &[(&str, &str, bool)] = compat![
    ("hermes_constants", "hermes_constants.py", false),
    ("hermes_cli", "hermes_cli/__init__.py", true),
    ("hermes_cli.config", "hermes_cli/config.py", false),
    ("hermes_cli.plugins", "hermes_cli/plugins.py", false),
    ("hermes_cli.middleware", "hermes_cli/middleware.py", false), // mp5
    ("tools", "tools/__init__.py", true),
    ("tools.registry", "tools/registry.py", false),
    ("agent", "agent/__init__.py", true),
    ("agent.context_engine", "agent/context_engine.py", false),
    ("agent.plugin_llm", "agent/plugin_llm.py", false),
    ("agent.memory_provider", "agent/memory_provider.py", false),
    ("agent.memory_manager", "agent/memory_manager.py", false),
    ("agent.image_gen_provider", "agent/image_gen_provider.py", false),
    ("agent.video_gen_provider", "agent/video_gen_provider.py", false),
    ("agent.web_search_provider", "agent/web_search_provider.py", false),
    ("agent.browser_provider", "agent/browser_provider.py", false),
    ("agent.subagent_lifecycle", "agent/subagent_lifecycle.py", false),
    ("agent.context_references", "agent/context_references.py", false),
    ("agent.terminal_env_provider", "agent/terminal_env_provider.py", false),
    ("agent.terminal_env_registry", "agent/terminal_env_registry.py", false),
    ("agent.tts_provider", "agent/tts_provider.py", false),
    ("agent.transcription_provider", "agent/transcription_provider.py", false),
    ("gateway", "gateway/__init__.py", true),
    ("gateway.platforms", "gateway/platforms/__init__.py", true),
    ("gateway.platforms.base", "gateway/platforms/base.py", false),
    ("gateway.platforms.event", "gateway/platforms/event.py", false),
    ("gateway.platforms.helpers", "gateway/platforms/helpers.py", false),
    ("gateway.platforms._shared", "gateway/platforms/_shared.py", false),
    ("agent.i18n", "agent/i18n.py", false),
    ("plugin_runtime.platform_registry", "plugin_runtime/platform_registry.py", false),
    ("gateway.status", "gateway/status.py", false),
    ("gateway.session", "gateway/session.py", false),
    ("gateway.session_context", "gateway/session_context.py", false),
    ("tools.approval", "tools/approval.py", false),
    ("tools.interrupt", "tools/interrupt.py", false),
    ("tools.env_passthrough", "tools/env_passthrough.py", false),
    ("tools.xai_http", "tools/xai_http.py", false),
    ("hermes_state", "hermes_state.py", false),
    ("providers", "providers/__init__.py", true),
    ("providers.base", "providers/base.py", false),
    // Hermes's plugin runtime package, mapped onto what plughost serves.
    ("plugin_runtime", "plugin_runtime/__init__.py", true),
    ("plugin_runtime.context", "plugin_runtime/context.py", false),
    ("plugin_runtime.dispatch", "plugin_runtime/dispatch.py", false),
    ("plugin_runtime.manifest", "plugin_runtime/manifest.py", false),
    ("plugin_runtime.manager", "plugin_runtime/manager.py", false),
    ("hermes_cli.platform_actions", "hermes_cli/platform_actions.py", false),
    // Not hosted: importing them raises an ImportError saying why ([`NOT_HOSTED`]).
    ("hermes_cli.kanban_db", "hermes_cli/kanban_db.py", false),
    ("hermes_cli.projects_db", "hermes_cli/projects_db.py", false),
    ("cron", "cron/__init__.py", true),
    ("tools.mcp_tool", "tools/mcp_tool.py", false),
    ("tools.mcp_oauth", "tools/mcp_oauth.py", false),
    ("gateway.config", "gateway/config.py", false),
    ("gateway.platform_registry", "gateway/platform_registry.py", false),
];

/// The compat modules that only refuse (an `ImportError` naming what
/// plughost does not host): served in-process, where the finder comes last,
/// but not written for child processes, where `PYTHONPATH` would put them
/// ahead of a real module of the same name.
const NOT_HOSTED: &[&str] = &[
    "hermes_cli.kanban_db",
    "hermes_cli.projects_db",
    "cron",
    "tools.mcp_oauth",
];

/// `_plughost_hermes` for processes a plugin starts ([`child_path`]).
const CHILD_STUB: &str = include_str!("../../../python/plughost/_compat/hermes/_child_stub.py");

static INSTALLED: PyOnceLock<()> = PyOnceLock::new();

/// Install the compat finder (once): appended to `sys.meta_path`, so a
/// module of the same name anywhere on `sys.path` is found first.
fn install(py: Python<'_>, plughost_home: &Path) -> PyResult<()> {
    INSTALLED
        .get_or_try_init(py, || {
            let sys_modules = py
                .import("sys")?
                .getattr("modules")?
                .cast_into::<PyDict>()?;
            let finder = match sys_modules.get_item("_plughost_hermes")? {
                Some(m) => m.cast_into::<PyModule>()?,
                None => module_from_source(py, "_plughost_hermes", FINDER_SOURCE, false)?,
            };
            finder.add_class::<HermesContext>()?;
            finder.add_function(pyo3::wrap_pyfunction!(python_fns::llm_complete, &finder)?)?;
            finder.add_function(pyo3::wrap_pyfunction!(python_fns::check_schema, &finder)?)?;
            finder.add_function(pyo3::wrap_pyfunction!(python_fns::schema_problem, &finder)?)?;
            finder.add_function(pyo3::wrap_pyfunction!(python_fns::dispatch_tool, &finder)?)?;
            finder.add_function(pyo3::wrap_pyfunction!(python_fns::parse_yaml, &finder)?)?;
            finder.add_function(pyo3::wrap_pyfunction!(
                python_fns::calling_session,
                &finder
            )?)?;
            finder.add_function(pyo3::wrap_pyfunction!(python_fns::mcp_servers, &finder)?)?;
            finder.add_function(pyo3::wrap_pyfunction!(
                python_fns::write_plugin_setting,
                &finder
            )?)?;
            if !sys_modules.contains("_plughost_hermes_ctx")? {
                module_from_source(py, "_plughost_hermes_ctx", CTX_SOURCE, false)?;
            }
            let sources = PyDict::new(py);
            for &(name, source, is_package) in COMPAT_MODULES {
                sources.set_item(name, (source, is_package))?;
            }
            let home = discover::hermes_home();
            finder
                .getattr("install")?
                .call1((sources, home.to_string_lossy().as_ref()))?;
            export_for_children(py, plughost_home, &home)?;
            Ok(())
        })
        .map(|_| ())
}

/// The compat modules as files, for processes a plugin starts
/// (`sys.executable -m helper` importing `hermes_constants`): written once
/// per content under `<plughost home>/cache/hermes-compat-<hash>/`.
fn child_path(plughost_home: &Path) -> std::io::Result<std::path::PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for (name, source, _) in COMPAT_MODULES {
        (name, source).hash(&mut hasher);
    }
    CHILD_STUB.hash(&mut hasher);
    let dir = plughost_home
        .join("cache")
        .join(format!("hermes-compat-{:016x}", hasher.finish()));
    if dir.is_dir() {
        return Ok(dir);
    }
    let scratch = dir.with_extension(format!("tmp.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    for &(name, source, is_package) in COMPAT_MODULES {
        if NOT_HOSTED.contains(&name) {
            continue;
        }
        let rel = name.replace('.', "/");
        let file = if is_package {
            scratch.join(&rel).join("__init__.py")
        } else {
            scratch.join(format!("{rel}.py"))
        };
        std::fs::create_dir_all(file.parent().expect("a module file has a parent"))?;
        std::fs::write(file, source)?;
    }
    std::fs::write(scratch.join("_plughost_hermes.py"), CHILD_STUB)?;
    match std::fs::rename(&scratch, &dir) {
        Ok(()) => Ok(dir),
        // Another process wrote the same content first.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&scratch);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

/// Let processes a plugin starts import what it imports: unless a real
/// Hermes is importable here (it wins, and is not shadowed), the compat
/// modules' directory is appended to `PYTHONPATH`; `HERMES_HOME` is the
/// home plugins were found in. A failure to write the files is only
/// logged: plugins in this process are not affected.
fn export_for_children(py: Python<'_>, plughost_home: &Path, hermes_home: &Path) -> PyResult<()> {
    let environ = py.import("os")?.getattr("environ")?;
    if environ.call_method1("get", ("HERMES_HOME",))?.is_none() {
        environ.set_item("HERMES_HOME", hermes_home.to_string_lossy().as_ref())?;
    }
    shim::export(&environ, plughost_home)?;
    if py
        .import("importlib.util")?
        .call_method1("find_spec", ("hermes_constants",))?
        .getattr("origin")?
        .extract::<String>()?
        .starts_with("<plughost:")
    {
        let dir = match child_path(plughost_home) {
            Ok(dir) => dir,
            Err(e) => {
                tracing::warn!(
                    "processes Hermes plugins start will not see the compat modules: {e}"
                );
                return Ok(());
            }
        };
        let dir = dir.to_string_lossy().into_owned();
        let current: String = environ.call_method1("get", ("PYTHONPATH", ""))?.extract()?;
        if !current.split(':').any(|p| p == dir) {
            let joined = if current.is_empty() {
                dir
            } else {
                format!("{current}:{dir}")
            };
            environ.set_item("PYTHONPATH", joined)?;
        }
    }
    Ok(())
}

/// Where `hermes_constants` comes from: a real installation, or compat.
fn constants_origin(py: Python<'_>) -> PyResult<String> {
    let module = py.import("hermes_constants")?;
    let file: Option<String> = module
        .getattr("__file__")
        .ok()
        .and_then(|f| f.extract().ok());
    Ok(match file {
        Some(f) if !f.starts_with("<plughost:") => f,
        _ => "compat (plughost's own hermes_constants)".into(),
    })
}

/// The plugin's manifest as Hermes's `PluginManifest` shows it.
fn manifest_object<'py>(py: Python<'py>, key: &str, dir: &Path) -> PyResult<Bound<'py, PyAny>> {
    let parsed = manifest::find(dir).and_then(|p| manifest::load(&p, dir).ok());
    let kw = PyDict::new(py);
    let (name, version, description, author, kind) = match &parsed {
        Some(m) => (
            m.manifest.name.clone(),
            m.manifest.version.clone(),
            m.manifest.description.clone(),
            m.manifest.author.clone(),
            m.kind.as_str(),
        ),
        None => (
            key.to_string(),
            String::new(),
            String::new(),
            String::new(),
            "standalone",
        ),
    };
    let hermes_plugins = discover::hermes_home().join("plugins");
    let source = if dir.starts_with(&hermes_plugins) {
        "user"
    } else {
        "project"
    };
    kw.set_item("name", name)?;
    kw.set_item("version", version)?;
    kw.set_item("description", description)?;
    kw.set_item("author", author)?;
    kw.set_item("kind", kind)?;
    kw.set_item("key", key)?;
    kw.set_item("source", source)?;
    kw.set_item("path", dir.to_string_lossy().as_ref())?;
    let m = parsed.as_ref().map(|m| &m.manifest);
    kw.set_item(
        "requires_env",
        m.map(|m| {
            m.requires_env
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default(),
    )?;
    kw.set_item(
        "provides_tools",
        m.map(|m| m.provides_tools.clone()).unwrap_or_default(),
    )?;
    kw.set_item(
        "provides_hooks",
        m.map(|m| m.provides_hooks.clone()).unwrap_or_default(),
    )?;
    py.import("types")?
        .getattr("SimpleNamespace")?
        .call((), Some(&kw))
}

/// What each loaded Hermes plugin registered that its host does not use
/// (plugin key → registrar names), for `plugins doctor`; in the host's
/// [`Extensions`].
#[derive(Default)]
struct NotUsed(std::sync::Mutex<std::collections::BTreeMap<String, Vec<String>>>);

fn record_not_used(host: &Extensions, key: &str, unused: &[String]) {
    let table = host.get::<NotUsed>();
    let mut map = table.0.lock().unwrap_or_else(|e| e.into_inner());
    if unused.is_empty() {
        map.remove(key);
    } else {
        map.insert(key.to_string(), unused.to_vec());
    }
}

/// The registrars plugin `key` called that `host` does not use
/// (recorded when it loaded there).
pub fn not_used(host: &Extensions, key: &str) -> Vec<String> {
    host.peek::<NotUsed>()
        .and_then(|t| {
            t.0.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .cloned()
        })
        .unwrap_or_default()
}

/// The host's event bus and loaded-plugin table (`_plughost_hermes_ctx.HostBus`),
/// made on first use; in the host's [`Extensions`].
#[derive(Default)]
struct Bus(std::sync::OnceLock<Py<PyAny>>);

fn bus<'py>(py: Python<'py>, host: &Extensions) -> PyResult<Bound<'py, PyAny>> {
    let table = host.get::<Bus>();
    if let Some(b) = table.0.get() {
        return Ok(b.bind(py).clone());
    }
    let made = remote::new_bus(py, host)?;
    Ok(table.0.get_or_init(|| made).bind(py).clone())
}

/// A loaded plugin's teardown, run when the host drops it (unload or the
/// host stopping): its `on_unload` callbacks and `spawn_task` tasks in
/// reverse order, its subscriptions, its place in `has_plugin`.
struct Teardown {
    runtime: Py<PyAny>,
    bus: Py<PyAny>,
    key: String,
    /// A memory provider directory's `_hermes_user_memory.<name>` package.
    memory_module: Option<String>,
    /// The host, whose memory provider the plugin may have made active.
    host: std::sync::Weak<Extensions>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let _ = crate::runtime::try_attach(|py| {
            if let Err(e) = self.runtime.bind(py).call_method0("unload") {
                tracing::warn!("Hermes plugin '{}' unload failed: {e}", self.key);
            }
            let _ = self.bus.bind(py).call_method1("unloaded", (&self.key,));
            if let Some(host) = self.host.upgrade() {
                memory::shut_down_for(&host, &self.key);
            }
            if let Some(name) = &self.memory_module {
                let _ = py
                    .import("agent.memory_provider")
                    .and_then(|m| m.call_method1("_plughost_forget_memory_dir", (name,)));
            }
        });
    }
}

/// Import a memory provider's directory as Hermes's memory loader does
/// (`_hermes_user_memory.<dir>`): its `register`, else one registering its
/// `MemoryProvider` subclass, and the package's name (dropped at unload).
fn import_memory_dir<'py>(
    py: Python<'py>,
    key: &str,
    dir: &Path,
) -> Result<(Bound<'py, PyAny>, String), PluginError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| key.to_string());
    let memory = py
        .import("agent.memory_provider")
        .map_err(|e| plugin_error(py, &e))?;
    let (module_name, module): (String, Bound<'py, PyAny>) = memory
        .getattr("_plughost_import_memory_dir")
        .and_then(|f| f.call1((&name, dir.to_string_lossy().as_ref())))
        .and_then(|r| r.extract())
        .map_err(|e| plugin_error(py, &e))?;
    let register = memory
        .getattr("_plughost_dir_register")
        .and_then(|f| f.call1((&module, &name)))
        .map_err(|e| plugin_error(py, &e));
    match register {
        Ok(register) => Ok((register, module_name)),
        Err(e) => {
            let _ = memory.call_method1("_plughost_forget_memory_dir", (&module_name,));
            Err(e)
        }
    }
}

/// A memory provider's plugin directory (Hermes's `kind: exclusive`, set or
/// coerced from its `__init__.py`): Hermes's memory loader imports it.
fn memory_directory(dir: &Path) -> bool {
    memory::is_memory_dir(dir)
        && manifest::find(dir)
            .and_then(|path| manifest::load(&path, dir).ok())
            .is_some_and(|m| matches!(m.kind, manifest::HermesKind::Exclusive))
}

/// Hand a loaded plugin's web providers to the registry the `web_search`
/// tool uses (the Flowly provider registry, its compat installed if needed).
fn register_web_providers(py: Python<'_>, providers: Vec<Py<PyAny>>) -> PyResult<()> {
    if providers.is_empty() {
        return Ok(());
    }
    crate::dialects::flowly::classes(py)?;
    let register = py
        .import("_plughost_hermes")?
        .getattr("register_web_provider")?;
    for provider in providers {
        register.call1((provider,))?;
    }
    Ok(())
}

/// The Hermes dialect (see the module docs).
pub struct Hermes;

impl Dialect for Hermes {
    fn lanes(&self) -> &'static [&'static crate::core::hooks::Lane] {
        lanes::LANES
    }
    fn events(&self) -> &'static [crate::core::hooks::EventRow] {
        lanes::EVENTS
    }
    fn reference(&self) -> Option<&'static crate::core::reference::DialectDoc> {
        Some(&reference::DOC)
    }
    fn id(&self) -> crate::plugins::format::DialectId {
        discover::DIALECT
    }

    /// Hermes's names are the core's, plus Hermes-only hooks plughost
    /// accepts and never fires ([`context::never_fires`]); the lanes an
    /// active memory provider is driven on fire ([`memory::is_memory_lane`]).
    fn never_fires(&self, event: &str) -> Option<&'static str> {
        if lanes::by_name(event).is_some()
            || event == members::CONTEXT_REFERENCES
            || memory::is_memory_lane(event)
        {
            None
        } else if let Some(why) = valid_hooks::never_fires(event) {
            Some(why)
        } else {
            Some("not a known event: it never fires")
        }
    }

    /// A plugin loaded without a host (an isolated worker's) gets state of its own.
    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError> {
        self.load_in(key, dir, home, super::hostless_state())
    }

    fn load_in(
        &self,
        key: &str,
        dir: &Path,
        home: &Path,
        state: &Arc<Extensions>,
    ) -> Result<LoadedPlugin, PluginError> {
        attach(|py| {
            install(py, home).map_err(|e| plugin_error(py, &e))?;
            // An installed distribution's entry point (its metadata directory
            // stands for it), as Hermes's `ep.load()`; a memory provider's
            // directory, as its memory loader; else a package of its own.
            let mut memory_module: Option<String> = None;
            let (register, package, manifest) = match entry_point::find(dir, key)? {
                Some((ep, group)) => {
                    let target = entry_point::load(py, &ep)?;
                    let register = match group {
                        entry_point::Group::Plugins => entry_point::register_of(&target, &ep)?,
                        entry_point::Group::MemoryProviders => {
                            entry_point::memory_register_of(&target, &ep)?
                        }
                    };
                    let manifest = entry_point::manifest_object(py, &ep, group)
                        .map_err(|e| plugin_error(py, &e))?;
                    (register, None, manifest)
                }
                None if memory_directory(dir) => {
                    if let Some(why) = gates::unmet(dir) {
                        return Err(PluginError::native(why));
                    }
                    let (register, module_name) = import_memory_dir(py, key, dir)?;
                    memory_module = Some(module_name);
                    let manifest =
                        manifest_object(py, key, dir).map_err(|e| plugin_error(py, &e))?;
                    (register, None, manifest)
                }
                None => {
                    if let Some(why) = gates::unmet(dir) {
                        return Err(PluginError::native(why));
                    }
                    let package = PluginPackage::import(key, dir, home)?;
                    let module = package.module(py);
                    let register = model_providers::register_of(py, &module, dir)?;
                    let manifest =
                        manifest_object(py, key, dir).map_err(|e| plugin_error(py, &e))?;
                    (register, Some(package), manifest)
                }
            };
            let bus = bus(py, state).map_err(|e| plugin_error(py, &e))?;
            let runtime = py
                .import("_plughost_hermes_ctx")
                .and_then(|m| m.getattr("PluginRuntime"))
                .and_then(|c| {
                    c.call1((
                        key,
                        &bus,
                        discover::hermes_home().to_string_lossy().as_ref(),
                        home.to_string_lossy().as_ref(),
                    ))
                })
                .map_err(|e| plugin_error(py, &e))?;
            let name: String = manifest
                .getattr("name")
                .and_then(|n| n.extract())
                .unwrap_or_else(|_| key.to_string());
            let teardown = Teardown {
                runtime: runtime.clone().unbind(),
                bus: bus.clone().unbind(),
                key: key.to_string(),
                memory_module,
                host: Arc::downgrade(state),
            };
            let ctx = Py::new(
                py,
                HermesContext::new(
                    key,
                    dir,
                    manifest.unbind(),
                    Arc::clone(state),
                    runtime.unbind(),
                ),
            )
            .map_err(|e| plugin_error(py, &e))?;
            // tools.registry.register inside register(ctx) reaches this context.
            let finder = py
                .import("_plughost_hermes")
                .map_err(|e| plugin_error(py, &e))?;
            finder
                .setattr("_CURRENT", ctx.clone_ref(py))
                .map_err(|e| plugin_error(py, &e))?;
            let outcome = register.call1((ctx.clone_ref(py),));
            let _ = finder.setattr("_CURRENT", py.None());
            let (mut registrations, unused) = ctx.get().finish();
            let cli_commands = ctx.get().take_cli_commands();
            let web_providers = ctx.get().take_web_providers();
            registered(py, outcome)?; // a failure drops `teardown`: what it spawned is released
            registrations.extend(model_providers::collect(py, state, key));
            registrations.extend(
                members::registrations(py, state, key, ctx.get().runtime(py))
                    .map_err(|e| plugin_error(py, &e))?,
            );
            let _ = bus.call_method1("loaded", (key, name));
            register_web_providers(py, web_providers).map_err(|e| plugin_error(py, &e))?;
            cli::commit(state, key, cli_commands);
            record_not_used(state, key, &unused);
            if !unused.is_empty() {
                tracing::info!(
                    "Hermes plugin '{key}' registered {} — registered, not used by this host",
                    unused.join(", ")
                );
            }
            Ok(LoadedPlugin {
                registrations,
                package,
                hold: Some(Box::new(teardown)),
            })
        })
    }

    fn discover(&self, home: &Path, lists: &PluginLists) -> Vec<Candidate> {
        // mp5: memory providers load by `memory.provider`, not `plugins.enabled`.
        let mut found = memory::select(home, discover::discover(lists));
        // mp6: `hermes_agent.memory_providers` entry points, after every other source.
        let memory_eps = entry_point::discover_memory(home, lists, &found);
        found.extend(memory_eps);
        found
    }

    /// Its manifest versions ([`mod@format`]).
    fn format(&self) -> Option<&'static dyn crate::plugins::format::PluginFormat> {
        Some(&format::HermesFormat)
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            sniff: Some(self),
            load_order: Some(self),
            doctor: Some(self),
            providers: Some(self),
            terminal: Some(self),
            renderers: Some(self),
            isolated: Some(self),
            ..Abilities::default()
        }
    }
}
