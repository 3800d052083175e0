//! The Felix plugin API: discovery of installed `felix.plugins` entry
//! points and Felix source trees ([`discover`]), `register(registry)` with
//! plughost's `PluginRegistry`, tools from `define_tool`, and the eight
//! agent-loop hooks plus startup hooks mapped onto the core's loop points
//! ([`hooks`]). The compat `felix` / `felix_ai` modules are served by a
//! finder consulted last, so a real Felix installation always wins.
//!
//! Felix's combination policies map onto the loop points' lanes:
//! `filter_history` → `history_ready` (chain), `before_turn` →
//! `iteration_start` (collect, appended), `before_model` → `prompt_final`
//! (chain, this call only), `after_model` → `model_replied` (chain),
//! `before_tool` → `tool_before` (stops at the first block), `after_tool` →
//! `tool_after` (merged, tag restored), `before_compact` → `compact_before`
//! (stops at the first cancel or summary), `compact_failed` →
//! `compact_failed`, startup hooks → `host_start`. Every Felix callback
//! registers at [`FIRST_LANE_PRIORITY`], so at a shared point Felix's run
//! before Codumentor's, in registration order.

mod auth;
mod cron;
pub mod discover;
mod format;
pub mod hooks;
pub mod lanes;
mod models;
pub mod reference;
mod routes;
mod sinks;

use std::path::Path;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule, PyTuple};

use super::abilities::{Abilities, Doctor, Renderers};
use super::{Dialect, LoadedPlugin};
use crate::core::extensions::Extensions;
use crate::core::hooks::{HookEntry, HookEvent, FIRST_LANE_PRIORITY};
use crate::core::outcome::PluginError;
use crate::core::registry::{Registration, Tool, ToolSpec};
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::Candidate;
use crate::runtime::{attach, module_from_source, plugin_error};

/// The finder and the facade the Rust side calls (`_plughost_felix`).
const FINDER_SOURCE: &str = include_str!("../../../python/plughost/_compat/felix/__init__.py");

/// The facade's parts, one concern each, in the order they import each
/// other: modules `_plughost_felix_<part>`, made before the facade.
const PARTS: [(&str, &str); 5] = [
    (
        "_plughost_felix_registry",
        include_str!("../../../python/plughost/_compat/felix/registry.py"),
    ),
    (
        "_plughost_felix_server",
        include_str!("../../../python/plughost/_compat/felix/server.py"),
    ),
    (
        "_plughost_felix_values",
        include_str!("../../../python/plughost/_compat/felix/values.py"),
    ),
    (
        "_plughost_felix_loader",
        include_str!("../../../python/plughost/_compat/felix/loader.py"),
    ),
    (
        "_plughost_felix_models",
        include_str!("../../../python/plughost/_compat/felix/models.py"),
    ),
];

include!("compat_modules.rs");

static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// `_plughost_felix`, with the compat finder installed (once): appended to
/// `sys.meta_path`, so a `felix` anywhere on `sys.path` is found first.
pub(crate) fn module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    MODULE
        .get_or_try_init(py, || {
            let sys_modules = py
                .import("sys")?
                .getattr("modules")?
                .cast_into::<PyDict>()?;
            let module = match sys_modules.get_item("_plughost_felix")? {
                Some(m) => m.cast_into::<PyModule>()?,
                None => {
                    for (name, source) in PARTS {
                        if sys_modules.get_item(name)?.is_none() {
                            module_from_source(py, name, source, false)?;
                        }
                    }
                    module_from_source(py, "_plughost_felix", FINDER_SOURCE, false)?
                }
            };
            let sources = PyDict::new(py);
            for (name, source, is_package) in COMPAT_MODULES {
                sources.set_item(name, (source, is_package))?;
            }
            module.getattr("install")?.call1((sources,))?;
            Ok(module.unbind())
        })
        .map(|m| m.bind(py).clone())
}

/// The lane a Felix hook kind fires on, as its row says ([`lanes::EVENTS`]).
pub fn point_of(kind: &str) -> Option<HookEvent> {
    lanes::EVENTS
        .iter()
        .find(|r| r.name == kind)
        .map(|r| r.lane)
}

/// The Felix dialect (see the module docs).
pub struct Felix;

impl Dialect for Felix {
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

    fn format(&self) -> Option<&'static dyn crate::plugins::format::PluginFormat> {
        Some(&Felix)
    }

    /// Felix's hook kinds map onto loop points ([`point_of`]); a kind no
    /// point takes is accepted and never fires.
    fn never_fires(&self, event: &str) -> Option<&'static str> {
        point_of(event)
            .is_none()
            .then_some("not a known event: it never fires")
    }

    /// A plugin loaded without a host (an isolated worker's) has no
    /// discovery to remember: its source tree's `pyproject.toml` says.
    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError> {
        self.load_in(key, dir, home, &Default::default())
    }

    fn load_in(
        &self,
        key: &str,
        dir: &Path,
        _home: &Path,
        state: &std::sync::Arc<Extensions>,
    ) -> Result<LoadedPlugin, PluginError> {
        let entry = discover::entry_for(state, key, dir).map_err(|m| PluginError {
            kind: "LookupError".into(),
            message: m,
            ..Default::default()
        })?;
        let (module_name, attr) = match entry.value.split_once(':') {
            Some((m, a)) => (m.trim().to_string(), a.trim().to_string()),
            None => (entry.value.trim().to_string(), String::new()),
        };
        attach(|py| {
            let felix = module(py).map_err(|e| plugin_error(py, &e))?;
            if let Some(dir) = &entry.source_dir {
                // A changed plugin's new files, not the cached old modules.
                let top = module_name.split('.').next().unwrap_or(&module_name);
                crate::dialects::fresh::refresh(py, top, dir);
            }
            let source_dir = entry
                .source_dir
                .as_ref()
                .map(|d| d.to_string_lossy().into_owned());
            let loaded = felix
                .getattr("load")
                .and_then(|f| f.call1((key, &module_name, &attr, source_dir)))
                .map_err(|e| plugin_error(py, &e))?;
            collect(py, key, &felix, &loaded).map_err(|e| plugin_error(py, &e))
        })
    }

    fn discover(&self, home: &Path, lists: &PluginLists) -> Vec<Candidate> {
        let state = Default::default();
        self.discover_in(home, lists, &crate::runtime::Runtime::python(), &state)
    }

    fn discover_in(
        &self,
        home: &Path,
        lists: &PluginLists,
        runtime: &crate::runtime::Runtime,
        state: &std::sync::Arc<Extensions>,
    ) -> Vec<Candidate> {
        discover::discover(state, home, lists, runtime.search_path())
    }

    fn entry_in(
        &self,
        key: &str,
        dir: &Path,
        state: &std::sync::Arc<Extensions>,
    ) -> Option<String> {
        discover::entry_for(state, key, dir).ok().map(|e| e.value)
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            doctor: Some(self),
            renderers: Some(self),
            ..Abilities::default()
        }
    }
}

impl Doctor for Felix {
    fn origin(&self) -> Option<String> {
        crate::runtime::Runtime::get()?;
        crate::runtime::try_attach(|py| {
            MODULE.get(py)?;
            let module = py.import("felix").ok()?;
            let file: Option<String> = module
                .getattr("__file__")
                .ok()
                .and_then(|f| f.extract().ok());
            Some(match file {
                Some(f) if !f.starts_with("<plughost:") => f,
                _ => "compat (plughost's own felix, felix_ai)".into(),
            })
        })
        .ok()
        .flatten()
    }

    fn modules_rank(&self) -> Option<u8> {
        Some(2)
    }
}

impl Renderers for Felix {
    fn own_renderer(&self) -> Option<Arc<dyn crate::core::outcome::Renderer>> {
        Some(Arc::new(hooks::FelixRenderer))
    }
}

/// Registrations from what `_plughost_felix.load` returned:
/// `(tools, hooks, startup_hooks, unused, cron_tasks, sinks, routes,
/// authenticators, model_providers)`.
fn collect(
    py: Python<'_>,
    key: &str,
    felix: &Bound<'_, PyModule>,
    loaded: &Bound<'_, PyAny>,
) -> PyResult<LoadedPlugin> {
    let loaded = loaded.cast::<PyTuple>()?;
    let mut registrations = Vec::new();
    let felix_module: Py<PyModule> = felix.clone().unbind();
    for item in loaded.get_item(0)?.try_iter()? {
        let (name, description, parameters, tool): (String, String, Bound<'_, PyAny>, Py<PyAny>) =
            item?.extract()?;
        let parameters: serde_json::Value = pythonize::depythonize(&parameters)?;
        let spec = ToolSpec {
            name: name.clone(),
            description,
            parameters,
            plugin: key.to_string(),
            toolset: String::new(),
            requires_env: Vec::new(),
        };
        let fatal = tool
            .bind(py)
            .getattr("fatal")
            .and_then(|f| f.is_truthy())
            .unwrap_or(false);
        let handler = hooks::FelixTool {
            tool,
            felix: felix_module.clone_ref(py),
            fatal,
        };
        let mut t = Tool::new(spec, Arc::new(handler));
        t.renderer = Some(Arc::new(hooks::FelixRenderer));
        registrations.push(Registration::Tool(t));
    }
    let mut add_hook = |kind: String, callback: Py<PyAny>, label: String| {
        let event = point_of(&kind);
        registrations.push(Registration::Hook {
            event,
            name: kind.clone(),
            entry: HookEntry {
                owner: key.to_string(),
                label,
                priority: FIRST_LANE_PRIORITY,
                callback: Arc::new(hooks::FelixHook {
                    kind,
                    callback,
                    felix: felix_module.clone_ref(py),
                }),
                stats: Default::default(),
            },
        });
    };
    for item in loaded.get_item(1)?.try_iter()? {
        let (kind, callback, label): (String, Py<PyAny>, String) = item?.extract()?;
        add_hook(kind, callback, label);
    }
    for item in loaded.get_item(2)?.try_iter()? {
        let (callback, label): (Py<PyAny>, String) = item?.extract()?;
        add_hook("startup_hook".into(), callback, label);
    }
    for item in loaded.get_item(4)?.try_iter()? {
        let (name, run): (String, Py<PyAny>) = item?.extract()?;
        registrations.push(Registration::Task(cron::task(key, &name, run)));
    }
    let (audit, usage): (Option<Py<PyAny>>, Option<Py<PyAny>>) = loaded.get_item(5)?.extract()?;
    if audit.is_some() || usage.is_some() {
        let sinks =
            sinks::FelixSinks::new(key.to_string(), audit, usage, felix_module.clone_ref(py));
        registrations.push(Registration::Observer(Arc::new(sinks)));
    }
    for item in loaded.get_item(6)?.try_iter()? {
        let (plugin, mounts, limit, rate_key): (
            Py<PyAny>,
            Vec<String>,
            Option<u64>,
            Option<Py<PyAny>>,
        ) = item?.extract()?;
        let declared = routes::Declared {
            mounts,
            limit,
            rate_key,
        };
        let entry = routes::entry(py, key, plugin, declared, felix_module.clone_ref(py));
        registrations.push(Registration::Routes(entry));
    }
    for item in loaded.get_item(7)?.try_iter()? {
        let (mode, builder): (String, Py<PyAny>) = item?.extract()?;
        let mode = auth::mode(key, mode, builder, felix_module.clone_ref(py));
        registrations.push(Registration::Authenticator(mode));
    }
    for item in loaded.get_item(8)?.try_iter()? {
        let (name, factory): (String, Py<PyAny>) = item?.extract()?;
        let profile = models::profile(key, name, factory, felix_module.clone_ref(py));
        registrations.push(Registration::ModelProvider(profile));
    }
    let unused: Vec<String> = loaded.get_item(3)?.extract()?;
    if !unused.is_empty() {
        tracing::info!(
            "Felix plugin '{key}' uses {} — accepted, never used by a command-line host",
            unused.join(", ")
        );
    }
    Ok(LoadedPlugin {
        registrations,
        package: None,
        hold: None,
    })
}
