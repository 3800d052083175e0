//! The Flowly plugin API: `register(ctx)` with `PluginContext`, the hook
//! context classes of `flowly.agent.hooks`, their calling and answer
//! conventions, and the compat `flowly` modules unmodified plugins import.

pub mod context;
pub mod handlers;
pub mod hooks;
pub mod lanes;
pub mod reference;
pub mod web;
pub mod web_report;

use std::path::Path;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

pub use context::{normalize_schema, PluginContext};

use super::abilities::{Abilities, BuiltinTools, Doctor, PythonClasses};
use super::{Dialect, LoadedPlugin};
use crate::core::outcome::PluginError;
use crate::dialects::shared::{register_function, registered};
use crate::runtime::loader::PluginPackage;
use crate::runtime::{attach, module_from_source, plugin_error};

/// One compat module: (module, source, is a package). Parents come before
/// their children; a package's `__init__` must not import its submodules
/// eagerly (they are installed after it), see `web_providers/__init__.py`.
type CompatModule = (&'static str, &'static str, bool);

macro_rules! compat {
    ($name:literal, $file:literal, $package:literal) => {
        (
            $name,
            include_str!(concat!("../../../python/plughost/_compat/flowly/", $file)),
            $package,
        )
    };
}

/// The compat `flowly` package.
const COMPAT_MODULES: &[CompatModule] = &[
    compat!("flowly", "__init__.py", true),
    compat!("flowly.agent", "agent/__init__.py", true),
    compat!("flowly.agent.hooks", "agent/hooks.py", false),
    compat!("flowly.agent.tools", "agent/tools/__init__.py", true),
    compat!(
        "flowly.agent.tools.web_providers",
        "agent/tools/web_providers/__init__.py",
        true
    ),
    compat!(
        "flowly.agent.tools.web_providers.base",
        "agent/tools/web_providers/base.py",
        false
    ),
    compat!(
        "flowly.agent.tools.web_providers._config",
        "agent/tools/web_providers/_config.py",
        false
    ),
    compat!(
        "flowly.agent.tools.web_providers._http",
        "agent/tools/web_providers/_http.py",
        false
    ),
    compat!(
        "flowly.agent.tools.web_providers.registry",
        "agent/tools/web_providers/registry.py",
        false
    ),
    compat!("flowly.plugins", "plugins/__init__.py", true),
    compat!("flowly.plugins.manifest", "plugins/manifest.py", false),
    compat!("flowly.profile", "profile.py", false),
];

/// The compat `flowly` leaf modules compiled on first import (the web
/// providers and tools: most hosts never import them), as (module, source).
const LAZY_COMPAT_MODULES: &[(&str, &str)] = &[
    (
        "flowly.agent.tools.web_providers.searxng",
        include_str!(
            "../../../python/plughost/_compat/flowly/agent/tools/web_providers/searxng.py"
        ),
    ),
    (
        "flowly.agent.tools.web_providers.brave",
        include_str!("../../../python/plughost/_compat/flowly/agent/tools/web_providers/brave.py"),
    ),
    (
        "flowly.agent.tools.web_providers.tavily",
        include_str!("../../../python/plughost/_compat/flowly/agent/tools/web_providers/tavily.py"),
    ),
    (
        "flowly.agent.tools.web_providers.exa",
        include_str!("../../../python/plughost/_compat/flowly/agent/tools/web_providers/exa.py"),
    ),
    (
        "flowly.agent.tools.web_providers.firecrawl",
        include_str!(
            "../../../python/plughost/_compat/flowly/agent/tools/web_providers/firecrawl.py"
        ),
    ),
    (
        "flowly.agent.tools.web_providers.parallel",
        include_str!(
            "../../../python/plughost/_compat/flowly/agent/tools/web_providers/parallel.py"
        ),
    ),
    (
        "flowly.agent.tools.web_providers.local",
        include_str!("../../../python/plughost/_compat/flowly/agent/tools/web_providers/local.py"),
    ),
    (
        "flowly.agent.tools.web_providers.ddgs",
        include_str!("../../../python/plughost/_compat/flowly/agent/tools/web_providers/ddgs.py"),
    ),
    (
        "flowly.agent.tools.web",
        include_str!("../../../python/plughost/_compat/flowly/agent/tools/web.py"),
    ),
];

/// `_plughost_web`: the built-in `web_search` / `web_extract` tools' Python
/// side, served (lazily) whether or not a real Flowly is installed.
const WEB_TOOLS_SOURCE: &str = include_str!("../../../python/plughost/_compat/plughost_web.py");

/// The finder serving lazy modules (`_plughost_flowly_lazy`).
const LAZY_FINDER_SOURCE: &str = include_str!("../../../python/plughost/_compat/flowly_lazy.py");

/// The classes of `flowly.agent.hooks` (real or compat) contexts are built from.
pub struct FlowlyClasses {
    pub tool_ctx: Py<PyAny>,
    pub llm_ctx: Py<PyAny>,
    pub session_ctx: Py<PyAny>,
    pub subagent_ctx: Py<PyAny>,
    pub gateway_ctx: Py<PyAny>,
    pub block: Py<PyAny>,
    pub skip: Py<PyAny>,
    pub rewrite: Py<PyAny>,
    pub namespace: Py<PyAny>,
}

static CLASSES: PyOnceLock<FlowlyClasses> = PyOnceLock::new();

/// Where `flowly` comes from once [`importable`] ran.
static ORIGIN: PyOnceLock<String> = PyOnceLock::new();

/// The hook classes (a hook's context is built from them); makes `flowly`
/// importable and imports `flowly.agent.hooks` on first use.
pub fn classes(py: Python<'_>) -> PyResult<&FlowlyClasses> {
    CLASSES.get_or_try_init(py, || {
        importable(py)?;
        let hooks = py.import("flowly.agent.hooks")?;
        let get = |name: &str| -> PyResult<Py<PyAny>> { Ok(hooks.getattr(name)?.unbind()) };
        Ok(FlowlyClasses {
            tool_ctx: get("ToolHookContext")?,
            llm_ctx: get("LLMHookContext")?,
            session_ctx: get("SessionHookContext")?,
            subagent_ctx: get("SubagentStopContext")?,
            gateway_ctx: get("GatewayDispatchContext")?,
            block: get("BlockAction")?,
            skip: get("SkipAction")?,
            rewrite: get("RewriteAction")?,
            namespace: py.import("types")?.getattr("SimpleNamespace")?.unbind(),
        })
    })
}

/// Make `flowly` importable, once: the real Flowly when one is installed,
/// else plughost's compat modules, served by a finder ahead of `sys.path`
/// (a stray `flowly` directory there is not Flowly) and run only when a
/// plugin (or a hook, or a web tool) imports them. Running all twelve at
/// each start that loaded a Flowly plugin was a millisecond, for plugins
/// that mostly import none. Returns where `flowly` comes from.
pub fn importable(py: Python<'_>) -> PyResult<&str> {
    ORIGIN
        .get_or_try_init(py, || install(py))
        .map(String::as_str)
}

fn install(py: Python<'_>) -> PyResult<String> {
    let sys_modules = py
        .import("sys")?
        .getattr("modules")?
        .cast_into::<PyDict>()?;
    if !sys_modules.contains("_plughost_flowly")? {
        let native = PyModule::new(py, "_plughost_flowly")?;
        native.add_class::<PluginContext>()?;
        crate::runtime::mark_imported(py, &native, "_plughost_flowly", false)?;
        sys_modules.set_item("_plughost_flowly", native)?;
    }
    let finder = match sys_modules.get_item("_plughost_flowly_lazy")? {
        Some(m) => m,
        None => {
            module_from_source(py, "_plughost_flowly_lazy", LAZY_FINDER_SOURCE, false)?.into_any()
        }
    };
    let sources = PyDict::new(py);
    let packages = pyo3::types::PyList::empty(py);
    // The built-in web tools' module, real Flowly or not (see web.rs).
    sources.set_item("_plughost_web", WEB_TOOLS_SOURCE)?;
    let (origin, compat) = match real_flowly(py)? {
        Some(path) => (path, false),
        None => {
            // Something already put a `flowly` in place: it stays.
            let compat = !sys_modules.contains("flowly")?;
            if compat {
                for &(name, source, is_package) in COMPAT_MODULES {
                    sources.set_item(name, source)?;
                    if is_package {
                        packages.append(name)?;
                    }
                }
                for &(name, source) in LAZY_COMPAT_MODULES {
                    sources.set_item(name, source)?;
                }
            }
            ("compat (plughost's own flowly modules)".to_string(), compat)
        }
    };
    finder
        .getattr("install")?
        .call1((sources, packages, compat))?;
    Ok(origin)
}

/// The directory of a real Flowly installation, if one is importable: a
/// regular `flowly` package with `agent/hooks`. Any other directory named
/// `flowly` on `sys.path` (an empty one in the current directory, a
/// namespace package, an unrelated project) is not Flowly.
fn real_flowly(py: Python<'_>) -> PyResult<Option<String>> {
    let spec = match find_top_level_spec(py, "flowly") {
        Ok(s) if !s.is_none() => s,
        _ => return Ok(None),
    };
    let origin: Option<String> = spec.getattr("origin")?.extract().unwrap_or(None);
    let Some(origin) = origin.filter(|o| o.ends_with("__init__.py")) else {
        return Ok(None);
    };
    let package = Path::new(&origin).parent().unwrap_or(Path::new("."));
    let agent = package.join("agent");
    let has_hooks = agent.join("hooks.py").is_file() || agent.join("hooks").is_dir();
    Ok(has_hooks.then(|| package.display().to_string()))
}

/// `importlib.util.find_spec(name)` for a top-level `name`, without
/// importing `importlib.util` (it runs `contextlib` and its imports,
/// milliseconds at a start): a loaded module's spec, else what the import
/// system's finders say (`_frozen_importlib._find_spec`, what
/// `importlib.util.find_spec` calls; that module is used when an
/// interpreter does not have it).
fn find_top_level_spec<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(module) = py.import("sys")?.getattr("modules")?.get_item(name) {
        return module.getattr("__spec__");
    }
    match py
        .import("_frozen_importlib")
        .and_then(|m| m.getattr("_find_spec"))
    {
        Ok(find) => find.call1((name, py.None())),
        Err(_) => py
            .import("importlib.util")?
            .getattr("find_spec")?
            .call1((name,)),
    }
}

/// The Flowly dialect (see the module docs).
pub struct Flowly;

/// Flowly's identity; its layout is that of plughost's plugin directories.
pub const DIALECT: crate::plugins::format::DialectId =
    crate::plugins::format::DialectId::new("flowly");

impl crate::plugins::format::PluginFormat for Flowly {
    fn id(&self) -> crate::plugins::format::DialectId {
        DIALECT
    }
}

impl Dialect for Flowly {
    fn events(&self) -> &'static [crate::core::hooks::EventRow] {
        lanes::EVENTS
    }
    /// Flowly's names are its rows' ([`lanes::EVENTS`]); others never fire.
    fn never_fires(&self, event: &str) -> Option<&'static str> {
        lanes::by_name(event)
            .is_none()
            .then_some("not a known event: it never fires")
    }
    fn reference(&self) -> Option<&'static crate::core::reference::DialectDoc> {
        Some(&reference::DOC)
    }
    fn id(&self) -> crate::plugins::format::DialectId {
        DIALECT
    }

    fn format(&self) -> Option<&'static dyn crate::plugins::format::PluginFormat> {
        Some(&Flowly)
    }

    fn load(&self, key: &str, dir: &Path, home: &Path) -> Result<LoadedPlugin, PluginError> {
        attach(|py| {
            importable(py).map_err(|e| plugin_error(py, &e))?;
            let package = PluginPackage::import(key, dir, home)?;
            let module = package.module(py);
            let register = register_function(
                &module,
                "the plugin's __init__.py defines no register(ctx) function",
            )?;
            let mut context = PluginContext::new(key, dir);
            if let Ok(manifest) = crate::plugins::manifest::load(dir) {
                context = context.with_manifest(manifest, source_of(dir, home));
            }
            let ctx = Py::new(py, context).map_err(|e| plugin_error(py, &e))?;
            let outcome = register.call1((ctx.clone_ref(py),));
            let registrations = ctx.get().finish();
            let providers = ctx.get().take_providers();
            registered(py, outcome)?;
            register_providers(py, providers).map_err(|e| plugin_error(py, &e))?;
            Ok(LoadedPlugin {
                registrations,
                package: Some(package),
                hold: None,
            })
        })
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            doctor: Some(self),
            builtin_tools: Some(self),
            python_classes: Some(self),
            ..Abilities::default()
        }
    }
}

impl Doctor for Flowly {
    fn origin(&self) -> Option<String> {
        crate::runtime::Runtime::get()?;
        crate::runtime::try_attach(|py| importable(py).ok().map(str::to_owned))
            .ok()
            .flatten()
    }

    fn section(
        &self,
        home: &Path,
        plugins: &[super::DoctorPlugin<'_>],
    ) -> Option<super::DoctorSection> {
        let report = web_report::WebReport::new(home, plugins);
        Some(super::DoctorSection {
            key: "web",
            json: serde_json::to_value(&report).unwrap_or_default(),
            lines: report.map(|r| r.lines()),
        })
    }

    fn modules_rank(&self) -> Option<u8> {
        Some(0)
    }
}

impl BuiltinTools for Flowly {
    fn builtin_tools(&self, home: &Path, owner: &str) -> Vec<crate::core::registry::Tool> {
        web::web_tools(home, owner)
    }
}

impl PythonClasses for Flowly {
    fn python_classes(&self, m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<PluginContext>()
    }
}

/// Hand a loaded plugin's web providers to the provider registry (real
/// Flowly's or compat), as Flowly's `register_web_search_provider` does.
fn register_providers(py: Python<'_>, providers: Vec<Py<PyAny>>) -> PyResult<()> {
    if providers.is_empty() {
        return Ok(());
    }
    let register = py
        .import("flowly.agent.tools.web_providers.registry")?
        .getattr("register_provider")?;
    for provider in providers {
        register.call1((provider,))?;
    }
    Ok(())
}

/// Where a plugin directory was found, in Flowly's words: `user` under the
/// home's `plugins/`, `project` under a `.plughost/plugins/`, else
/// `bundled` (the scan roots; see `HostBuilder::build`).
fn source_of(dir: &Path, home: &Path) -> &'static str {
    if dir.starts_with(home.join("plugins")) {
        "user"
    } else if dir
        .parent()
        .is_some_and(|p| p.ends_with(Path::new(".plughost").join("plugins")))
    {
        "project"
    } else {
        "bundled"
    }
}
