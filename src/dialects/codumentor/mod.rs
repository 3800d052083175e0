//! The Codumentor backend-plugin API: a class with `async def
//! register(self, bus)`, `bus.on(event, handler, priority=)`, handlers
//! `(agent, ctx, payload)` answering control dicts.
//!
//! Packaging is plughost's (the seed cites an unavailable page; spec §2.1,
//! §7 D2): a directory whose `plugin.yaml` says `dialect: codumentor` and
//! `entry: "<module>:<Class>"`, with the code under `backend/`, which is
//! put on `sys.path` (appended: an installed package of the same name is
//! never shadowed). Loading ([`Codumentor::load`]) imports the module
//! under its real dotted name, builds `Class(config=None, **args)` (args:
//! the manifest's, with `plugins.config.<key>` of `config.json` merged
//! over them), calls `set_plugin_host(host)` when the class defines it,
//! and awaits `register(bus)` (a sync `register` is accepted too). A
//! failure leaves nothing behind: the subscriptions are dropped and the
//! plugin's modules leave `sys.modules`. Load order: [`order`]; it
//! imports each in-process plugin's module first (`prepare`) to read the
//! class's `meta["dependencies"]`, then builds and registers the classes
//! in the order resolved with them.
//!
//! The bus and the handler chain live in Python
//! (`python/plughost/_compat/codumentor_bus.py`, loaded as
//! `_plughost_codumentor`), beside the compat `codumentor` package that
//! module serves through a finder consulted last (a real Codumentor always
//! wins). Answers are interpreted there into decisions ([`Decision`]) the
//! agent loop executes.

mod format;
pub mod lanes;
pub mod order;
mod packages;
mod payload;
pub mod points;
mod prepare;
mod recorder;
pub mod reference;
pub mod session_state;
pub mod turn;

use crate::core::wait::block_on;
use packages::{claim_held, unhold, PackageHold};
use prepare::take_prepared;
pub(crate) use prepare::{prepare, release_prepared, with_meta_dependencies};
use recorder::Recorder;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::abilities::{Abilities, Doctor, Isolated, LoadOrder, RunningTools};
use super::{Dialect, LoadedPlugin};
use crate::core::hooks::{
    HookAction, HookCallback, HookEntry, HookEvent, HookPayload, HookReturn, HookStats,
};
use crate::core::outcome::PluginError;
use crate::core::registry::Registration;
use crate::dialects::shared::load_error;
use crate::plugins::format::{DialectId, PluginFormat};
use crate::plugins::manifest::Manifest;
use crate::runtime::bridge::{self, Awaited, InlineDriver};
use crate::runtime::{attach, module_from_source, plugin_error, try_attach};

/// The dialect's name (`dialect: codumentor` in a manifest).
pub const DIALECT: DialectId = DialectId::new("codumentor");

/// The Python half: bus, chain, compat finder.
const BUS_SOURCE: &str = include_str!("../../../python/plughost/_compat/codumentor_bus.py");

macro_rules! compat {
    ($name:literal, $file:literal, $package:literal) => {
        (
            $name,
            include_str!(concat!(
                "../../../python/plughost/_compat/codumentor/",
                $file
            )),
            $package,
        )
    };
}

/// The compat `codumentor` package: (module, source, is a package).
const COMPAT_MODULES: &[(&str, &str, bool)] = &[
    compat!("codumentor", "__init__.py", true),
    compat!("codumentor.agent", "agent/__init__.py", true),
    compat!("codumentor.agent.types", "agent/types.py", false),
    compat!("codumentor.agent.tools", "agent/tools.py", false),
    compat!(
        "codumentor.agent.context_notes",
        "agent/context_notes.py",
        false
    ),
    compat!("codumentor.plugins", "plugins/__init__.py", true),
    compat!("codumentor.plugins.utils", "plugins/utils.py", false),
    compat!(
        "codumentor.plugins.collect_points",
        "plugins/collect_points.py",
        false
    ),
];

/// Events the seed defines that a command-line host never fires (spec
/// §2.8): accepted silently and listed by `plugins doctor` as never firing.
pub const OUT_OF_SCOPE: &[&str] = &[
    "onAtQuery",
    "onAtContentResolve",
    "onToolPermissionDecision",
    "onToolProgress",
    "onReportCollect",
    "onSessionReport",
    "onSessionReportRender",
    "onErrorDecision",
    "onIngestionStart",
    "onResolveRepositories",
    "onRegisterRepoProviders",
    "onRepositoriesReady",
    "onIngestionComplete",
    "onIngestionError",
    "onRegisterScmAdapters",
    "onRegisterSourceProviders",
    "onRegisterOAuthProviders",
    "onOAuthAccountAdded",
    "onOAuthAccountRemoved",
    "onOAuthTokenRefreshed",
];

/// Events plughost fires (spec §2.4), at the loop points of §1.2.
pub const IN_SCOPE: &[&str] = &[
    "onServerReady",
    "onInputReceived",
    "onContextReady",
    "onAfterInput",
    "onPromptAssemble",
    "onAfterPromptAssemble",
    "onLLMCallStart",
    "onLLMStream",
    "onLLMCallEnd",
    "onUsageTracked",
    "onLLMError",
    "onAfterLLM",
    "onToolInvokeStart",
    "onToolExecuting",
    "onToolInvokeEnd",
    "onAfterTool",
    "onBeforeSendResponse",
    "onResponsePersist",
    "onTurnAborted",
    "onTurnInterrupted",
    "onError",
    "onSessionEvict",
    "onScheduledRunGate",
    "onScheduledRunAutoDisabled",
    "onConfigReload",
];

/// Why a Codumentor subscription will never be called, if it will not:
/// `None` for an event plughost fires.
pub fn never_fires(event: &str) -> Option<&'static str> {
    if IN_SCOPE.contains(&event) && points::points(event).next().is_some() {
        None
    } else if event == "onLLMStream" {
        Some("plughost does not stream model deltas to hooks (run and chat alike): it never fires")
    } else if OUT_OF_SCOPE.contains(&event) {
        Some("a Codumentor server event a command-line host does not have: it never fires")
    } else {
        Some("not a known Codumentor event: it never fires")
    }
}

/// What a manifest of this dialect needs on disk beyond itself: the
/// `backend/` directory its code lives in. `None` when all is there (or
/// the manifest is of another dialect).
pub fn layout_problem(m: &Manifest, dir: &Path) -> Option<String> {
    if m.dialect.name.as_deref() != Some(DIALECT.as_str()) {
        return None;
    }
    let backend = dir.join("backend");
    (!backend.is_dir()).then(|| {
        format!(
            "no backend/ directory (a Codumentor plugin's code lives in {}, which is put on sys.path; entry: {} names its class)",
            backend.display(),
            m.dialect.entry.as_deref().unwrap_or("<module>:<Class>")
        )
    })
}

/// A decision a chain of handlers asked of the agent loop (the answers
/// each event honours, spec §2.3); `plugin` is the key of the plugin that
/// asked.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    ShortCircuit {
        assistant_text: String,
        plugin: String,
    },
    VetoTool {
        reason: String,
        plugin: String,
    },
    AbortTurn {
        reason: String,
        assistant_text: String,
        plugin: String,
    },
    ParamPatch {
        model: Option<String>,
        params: Map<String, Value>,
        plugin: String,
    },
    InsertStep {
        messages: Vec<Value>,
        plugin: String,
    },
    EnqueueTool {
        tool: String,
        args: Map<String, Value>,
        plugin: String,
    },
    RequeueTool {
        plugin: String,
    },
    RetryWith {
        patched_args: Map<String, Value>,
        backoff_ms: u64,
        plugin: String,
    },
    LlmRetry {
        plugin: String,
    },
    StreamControl {
        abort: bool,
        replace_delta: Option<String>,
        plugin: String,
    },
}

/// The Python half, installed once per process.
struct Installed {
    module: Py<PyModule>,
}

static INSTALLED: PyOnceLock<Installed> = PyOnceLock::new();

fn installed(py: Python<'_>) -> PyResult<&Installed> {
    INSTALLED.get_or_try_init(py, || {
        let sys_modules = py
            .import("sys")?
            .getattr("modules")?
            .cast_into::<PyDict>()?;
        let module = match sys_modules.get_item("_plughost_codumentor")? {
            Some(m) => m.cast_into::<PyModule>()?,
            None => module_from_source(py, "_plughost_codumentor", BUS_SOURCE, false)?,
        };
        sys_modules.set_item("_plughost_codumentor", &module)?;
        module.add_class::<Recorder>()?;
        let sources = PyDict::new(py);
        for (name, source, is_package) in COMPAT_MODULES {
            sources.set_item(name, (source, is_package))?;
        }
        module.getattr("install")?.call1((sources,))?;
        module.setattr("TABLES", PyDict::new(py))?;
        module.setattr("HOSTS", PyDict::new(py))?;
        Ok(Installed {
            module: module.unbind(),
        })
    })
}

/// The per-host Python objects, keyed by the host's home: the table of
/// subscriptions (`bus.emit` and the loop fire from it) and the host
/// facade (`set_plugin_host`, `ctx["plugin_host"]`).
fn per_home<'py>(py: Python<'py>, home: &Path) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let module = installed(py)?.module.bind(py);
    let home = home.to_string_lossy().into_owned();
    let get = |dict: &str, make: Bound<'py, PyAny>| -> PyResult<Bound<'py, PyAny>> {
        let dict = module.getattr(dict)?.cast_into::<PyDict>()?;
        match dict.get_item(&home)? {
            Some(v) => Ok(v),
            None => {
                let v = make.call0()?;
                dict.set_item(&home, &v)?;
                Ok(v)
            }
        }
    };
    let table = get("TABLES", module.getattr("Table")?)?;
    let host = get(
        "HOSTS",
        py.import("codumentor.plugins.collect_points")
            .and_then(|m| m.getattr("PluginHost"))
            .or_else(|_| {
                // A real Codumentor has its own host: plughost's facade stands in.
                PyModule::from_code(
                    py,
                    c"class PluginHost:\n    def __init__(self):\n        self._p=[]\n    def add(self,k,p):\n        self._p.append((k,p))\n    def collect(self,point,payload=None):\n        return []\n    def provide(self,point,fn,provider='label'):\n        pass\n",
                    c"<plughost:codumentor_host>",
                    c"_plughost_codumentor_host",
                )?
                .getattr("PluginHost")
            })?,
    )?;
    Ok((table, host))
}

/// `plugins.config.<key>` of `config.json`, merged over the manifest's
/// `args` (a value that is not a mapping is warned about and ignored).
fn constructor_args(key: &str, manifest: &Manifest, home: &Path) -> Map<String, Value> {
    let mut args = manifest.dialect.args.clone();
    let path = crate::plugins::config::config_path(home);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return args;
    };
    let Ok(doc) = serde_json::from_str::<Value>(&text) else {
        return args; // reading the plugin lists already reported it
    };
    match doc.pointer(&format!(
        "/plugins/config/{}",
        key.replace('~', "~0").replace('/', "~1")
    )) {
        None | Some(Value::Null) => {}
        Some(Value::Object(over)) => args.extend(over.clone()),
        Some(_) => tracing::warn!(
            "{}: plugins.config.{key} must be a mapping of constructor arguments; ignored",
            path.display()
        ),
    }
    args
}

/// The Codumentor dialect (see the module docs).
pub struct Codumentor;

impl Dialect for Codumentor {
    fn lanes(&self) -> &'static [&'static crate::core::hooks::Lane] {
        lanes::LANES
    }
    fn events(&self) -> &'static [crate::core::hooks::EventRow] {
        lanes::EVENTS
    }
    fn reference(&self) -> Option<&'static crate::core::reference::DialectDoc> {
        Some(&reference::DOC)
    }

    fn id(&self) -> DialectId {
        DIALECT
    }

    fn format(&self) -> Option<&'static dyn PluginFormat> {
        Some(&Codumentor)
    }

    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError> {
        let manifest = crate::plugins::manifest::load_with(dir, crate::dialects::formats())
            .map_err(|e| load_error("ManifestError", &e.to_string()))?;
        let entry = manifest.dialect.entry.clone().ok_or_else(|| {
            load_error(
                "ManifestError",
                "the manifest has no entry: \"<module>:<Class>\"",
            )
        })?;
        let (module_name, class_name) = entry
            .split_once(':')
            .expect("the manifest parser checked module:Class");
        let top = module_name
            .split('.')
            .next()
            .unwrap_or(module_name)
            .to_string();
        let backend = dir.join("backend");
        claim_held(&top, key, &backend)?;
        if let Some(Err(e)) = take_prepared(dir) {
            // Its import already failed while the order was resolved.
            unhold(&top, key, &backend);
            return Err(e);
        }
        let args = constructor_args(key, &manifest, home);
        let loaded = attach(|py| load_in(py, key, home, &backend, module_name, class_name, &args));
        match loaded {
            Ok(registrations) => Ok(LoadedPlugin {
                registrations,
                package: None,
                hold: Some(Box::new(PackageHold::new(&top, key, &backend))),
            }),
            Err(e) => {
                unhold(&top, key, &backend);
                Err(e)
            }
        }
    }

    fn entry_in(
        &self,
        _key: &str,
        dir: &Path,
        _state: &Arc<crate::core::extensions::Extensions>,
    ) -> Option<String> {
        crate::plugins::manifest::load_with(dir, crate::dialects::formats())
            .ok()?
            .dialect
            .entry
    }

    fn never_fires(&self, event: &str) -> Option<&'static str> {
        never_fires(event)
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            load_order: Some(self),
            doctor: Some(self),
            running_tools: Some(self),
            isolated: Some(self),
            session_state: Some(super::SessionState {
                export: session_state::export,
                import: session_state::import,
            }),
            ..Abilities::default()
        }
    }
}

impl LoadOrder for Codumentor {
    fn order(
        &self,
        candidates: Vec<crate::plugins::discovery::Candidate>,
        isolated: &dyn Fn(&str) -> bool,
    ) -> Vec<crate::plugins::discovery::Candidate> {
        order::load_order_importing(candidates, isolated)
    }

    fn check_dependencies(
        &self,
        c: crate::plugins::discovery::Candidate,
        state_of: &dyn Fn(&str) -> Option<super::DependencyState>,
    ) -> crate::plugins::discovery::Candidate {
        order::check_dependencies(c, state_of)
    }

    fn dependencies(&self, _key: &str, dir: &Path) -> Vec<String> {
        let declared = crate::plugins::manifest::load_with(dir, crate::dialects::formats())
            .map(|m| m.dialect.dependencies)
            .unwrap_or_default();
        with_meta_dependencies(&declared, dir)
    }
}

impl Doctor for Codumentor {
    fn origin(&self) -> Option<String> {
        crate::runtime::Runtime::get()?;
        try_attach(|py| {
            let m = INSTALLED.get(py)?;
            m.module
                .bind(py)
                .getattr("origin")
                .and_then(|f| f.call0())
                .and_then(|o| o.extract::<String>())
                .ok()
        })
        .ok()
        .flatten()
    }

    fn modules_rank(&self) -> Option<u8> {
        Some(1)
    }

    fn shows_load_order(&self) -> bool {
        true
    }
}

/// `agent.tool_registry` registers tools while a plugin runs.
impl RunningTools for Codumentor {
    fn runtime_tool(&self, home: &Path, name: &str) -> Option<crate::core::registry::Tool> {
        turn::runtime_tool(home, name)
    }

    fn renderer(&self) -> Option<Arc<dyn crate::core::outcome::Renderer>> {
        Some(turn::tool_result_renderer())
    }
}

impl Isolated for Codumentor {
    /// Its handlers of one event form one chain across processes.
    fn carry_out(&self, lc: &mut crate::core::hooks::LoopContext) -> Option<super::Carried> {
        let (state, back) = points::carried_chain(lc);
        Some(super::Carried {
            state: state.and_then(|w| serde_json::to_value(w).ok()),
            back: Box::new(move |v| {
                if let Ok(w) = serde_json::from_value(v) {
                    back.store(w)
                }
            }),
        })
    }

    fn carry_in(&self, lc: &mut crate::core::hooks::LoopContext, state: Value) {
        if let Ok(w) = serde_json::from_value(state) {
            points::restore_chain(lc, w);
        }
    }

    fn carry_left(&self, lc: &mut crate::core::hooks::LoopContext) -> Option<Value> {
        points::chain_left(lc).and_then(|w| serde_json::to_value(w).ok())
    }
}

#[allow(clippy::too_many_arguments)]
fn load_in(
    py: Python<'_>,
    key: &str,
    home: &Path,
    backend: &Path,
    module_name: &str,
    class_name: &str,
    args: &Map<String, Value>,
) -> Result<Vec<Registration>, PluginError> {
    let err = |e: PyErr| plugin_error(py, &e);
    let bus_module = installed(py).map_err(err)?.module.bind(py).clone();
    let (table, host) = per_home(py, home).map_err(err)?;
    let class = import_class(py, backend, module_name, class_name)?;
    let kwargs = pythonize::pythonize(py, args)
        .map_err(|e| load_error("TypeError", &format!("args: {e}")))?
        .cast_into::<PyDict>()
        .map_err(|_| load_error("TypeError", "args must be a mapping"))?;
    kwargs.set_item("config", py.None()).map_err(err)?;
    let instance = class.call((), Some(&kwargs)).map_err(err)?;
    warn_on_meta_name(key, &instance);
    if instance.hasattr("set_plugin_host").unwrap_or(false) {
        instance
            .call_method1("set_plugin_host", (&host,))
            .map_err(err)?;
    }
    let register = match instance.getattr("register") {
        Ok(r) if r.is_callable() => r,
        _ => {
            return Err(load_error(
                "AttributeError",
                &format!("class '{class_name}' has no register(self, bus) method"),
            ))
        }
    };
    let recorder = Py::new(
        py,
        Recorder {
            key: key.to_string(),
            home: home.to_path_buf(),
            table: table.clone().unbind(),
            pending: Mutex::new(Vec::new()),
        },
    )
    .map_err(err)?;
    let bus = bus_module
        .getattr("HookBus")
        .and_then(|cls| cls.call1((key, &table, recorder.clone_ref(py))))
        .map_err(err)?;
    let outcome = register.call1((&bus,)).and_then(|ret| {
        match InlineDriver::suspended(|| bridge::resolve(py, ret)) {
            Awaited::Ready(r) => r,
            Awaited::Pending(task) => {
                crate::runtime::threads::detach_blocking(py, move || block_on(task))
            }
        }
    });
    let committed = outcome.is_ok();
    let _ = bus.call_method1("_close", (committed,));
    let registrations = std::mem::take(
        &mut *recorder
            .get()
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    if let Err(e) = outcome {
        drop(registrations); // their Drop takes them out of the table
        return Err(err(e));
    }
    host.call_method1("add", (key, &instance)).map_err(err)?;
    Ok(registrations)
}

/// The seed's `meta["name"]` should equal the key; the manifest wins.
fn warn_on_meta_name(key: &str, instance: &Bound<'_, PyAny>) {
    let name = instance
        .getattr("meta")
        .ok()
        .and_then(|m| m.get_item("name").ok())
        .and_then(|n| n.extract::<String>().ok());
    if let Some(name) = name.filter(|n| n != key) {
        tracing::warn!(
            "Codumentor plugin '{key}': its class's meta[\"name\"] is '{name}'; the manifest's name '{key}' is used"
        );
    }
}

/// Put `backend` on `sys.path` and import the plugin class from
/// `module_name` (a module already imported is not run again).
fn import_class<'py>(
    py: Python<'py>,
    backend: &Path,
    module_name: &str,
    class_name: &str,
) -> Result<Bound<'py, PyAny>, PluginError> {
    let err = |e: PyErr| plugin_error(py, &e);
    // A changed plugin's new files, not the cached old modules.
    let top = module_name.split('.').next().unwrap_or(module_name);
    crate::dialects::fresh::refresh(py, top, backend);
    let path = py
        .import("sys")
        .and_then(|s| s.getattr("path"))
        .map_err(err)?;
    let entry = backend.to_string_lossy().into_owned();
    if !path.contains(&entry).map_err(err)? {
        path.call_method1("append", (&entry,)).map_err(err)?;
    }
    let module = py
        .import("importlib")
        .and_then(|m| m.call_method1("import_module", (module_name,)))
        .map_err(err)?;
    match module.getattr(class_name) {
        Ok(c) if c.is_callable() => Ok(c),
        _ => Err(load_error(
            "",
            &format!("no class '{class_name}' in module '{module_name}'"),
        )),
    }
}
