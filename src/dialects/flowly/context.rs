//! `flowly.plugins.PluginContext`: the surface a Flowly plugin's
//! `register(ctx)` touches, and the schema shapes `register_tool` accepts.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString};
use serde_json::{json, Map, Value};

use super::handlers::{PyCommand, PyTool};
use super::hooks::PyHook;
use crate::core::hooks::{HookEntry, HookStats};
use crate::core::registry::{
    normalize_command_name, Command, Registration, Skill, Tool, ToolSpec, RESERVED_COMMANDS,
};
use crate::dialects::shared::{skill_name_problem, SkillNameProblem};
use crate::plugins::manifest::{Manifest, PluginKind};

struct ContextState {
    open: bool,
    pending: Vec<Registration>,
    /// Web search providers, handed to the provider registry only once
    /// `register(ctx)` has returned without error.
    providers: Vec<Py<PyAny>>,
}

/// `flowly.plugins.PluginContext`: the only surface a plugin touches.
#[pyclass(module = "flowly.plugins", name = "PluginContext", frozen)]
pub struct PluginContext {
    key: String,
    dir: PathBuf,
    /// The plugin's manifest and where it was found (`bundled`, `user`,
    /// `project`); `None` outside any plugin directory (`Host.context`).
    manifest: Option<(Manifest, String)>,
    /// `ctx.manifest`, built on first use (one object per context).
    manifest_obj: PyOnceLock<Py<PyAny>>,
    state: Mutex<ContextState>,
}

impl PluginContext {
    pub fn new(key: &str, dir: &Path) -> PluginContext {
        PluginContext {
            key: key.to_string(),
            dir: dir.to_path_buf(),
            manifest: None,
            manifest_obj: PyOnceLock::new(),
            state: Mutex::new(ContextState {
                open: true,
                pending: Vec::new(),
                providers: Vec::new(),
            }),
        }
    }

    /// The context of a plugin found at `source` with `manifest`.
    pub fn with_manifest(mut self, manifest: Manifest, source: &str) -> PluginContext {
        self.manifest = Some((manifest, source.to_string()));
        self
    }

    /// Close registration and take what was registered.
    pub fn finish(&self) -> Vec<Registration> {
        let mut state = self.state.lock().expect("context lock");
        state.open = false;
        std::mem::take(&mut state.pending)
    }

    /// The web search providers registered (after [`finish`](Self::finish)).
    pub fn take_providers(&self) -> Vec<Py<PyAny>> {
        std::mem::take(&mut self.state.lock().expect("context lock").providers)
    }

    fn ensure_open(&self, state: &ContextState) -> PyResult<()> {
        if state.open {
            Ok(())
        } else {
            Err(PyRuntimeError::new_err(format!(
                "plugin '{}' registered something after register(ctx) returned; register everything inside register(ctx)",
                self.key
            )))
        }
    }

    fn push(&self, registration: Registration) -> PyResult<()> {
        let mut state = self.state.lock().expect("context lock");
        self.ensure_open(&state)?;
        state.pending.push(registration);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn add_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        handler: Option<&Bound<'_, PyAny>>,
        check_fn: Option<&Bound<'_, PyAny>>,
        description: &str,
        extras: ToolExtras,
    ) -> PyResult<()> {
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_tool: name must be a string"))?;
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(PyValueError::new_err(
                "register_tool: name must not be empty",
            ));
        }
        let handler = handler.ok_or_else(|| {
            PyTypeError::new_err(format!("register_tool('{name}'): handler is required"))
        })?;
        require_callable(handler, "register_tool: handler")?;
        let check_fn = check_fn.filter(|c| !c.is_none());
        if let Some(c) = check_fn {
            require_callable(c, "register_tool: check_fn")?;
        }
        let schema_value: Value = match schema {
            None => Value::Null,
            Some(s) if s.is_none() => Value::Null,
            Some(s) => crate::runtime::value::to_json(s).map_err(|e| {
                PyValueError::new_err(format!(
                    "register_tool('{name}'): schema is not JSON-like: {e}"
                ))
            })?,
        };
        let (parameters, schema_description) = normalize_schema(&schema_value);
        let description = if description.is_empty() {
            schema_description
        } else {
            description.to_string()
        };
        let py_tool = PyTool::new(
            py,
            handler.clone().unbind(),
            check_fn.map(|c| c.clone().unbind()),
            extras.requires_env.clone(),
        )?;
        let spec = ToolSpec {
            name,
            description,
            parameters,
            plugin: self.key.clone(),
            toolset: extras.toolset,
            requires_env: extras.requires_env,
        };
        self.push(Registration::Tool(Tool::new(spec, Arc::new(py_tool))))
    }
}

impl PluginContext {
    /// plughost's own `Host.register_tool` (the wheel), in Flowly's
    /// keywords: `toolset` kept as given, an unset `requires_env` variable
    /// makes the tool unavailable.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn py_register_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        handler: Option<&Bound<'_, PyAny>>,
        check_fn: Option<&Bound<'_, PyAny>>,
        description: &str,
        toolset: Option<&Bound<'_, PyAny>>,
        requires_env: Option<&Bound<'_, PyAny>>,
        is_async: Option<&Bound<'_, PyAny>>,
        emoji: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = (is_async, emoji);
        let label: String = name.extract().unwrap_or_default();
        let extras = tool_extras(&label, toolset, requires_env)?;
        self.add_tool(py, name, schema, handler, check_fn, description, extras)
    }
}

/// The toolsets Flowly knows (those of Hermes's `toolsets.py`, which
/// Flowly's are derived from, and Flowly's own `media`); a plugin's other
/// toolset is `extensions`.
const FLOWLY_TOOLSETS: &[&str] = &[
    "media",
    "video",
    "video_gen",
    "x_search",
    "computer_use",
    "kanban",
    "context_engine",
    "web",
    "search",
    "terminal",
    "file",
    "browser",
    "vision",
    "image_gen",
    "tts",
    "memory",
    "skills",
    "todo",
    "clarify",
    "delegation",
    "code_execution",
    "cronjob",
    "messaging",
    "session_search",
    "homeassistant",
    "moa",
    "rl",
    "extensions",
];

/// `toolset=` and `requires_env=` checked for shape.
fn tool_extras(
    label: &str,
    toolset: Option<&Bound<'_, PyAny>>,
    requires_env: Option<&Bound<'_, PyAny>>,
) -> PyResult<ToolExtras> {
    let toolset = match toolset.filter(|t| !t.is_none()) {
        None => String::new(),
        Some(t) => t.extract::<String>().map_err(|_| {
            PyTypeError::new_err(format!(
                "register_tool('{label}'): toolset must be a string, got {}",
                type_name(t)
            ))
        })?,
    };
    let requires_env = env_names(label, requires_env)?;
    Ok(ToolExtras {
        toolset,
        requires_env,
    })
}

/// What Flowly's `register_tool` takes beyond plughost's own arguments.
#[derive(Default)]
struct ToolExtras {
    toolset: String,
    requires_env: Vec<String>,
}

/// `requires_env=`: `None`, one name, or a list of names (or of
/// `{"name": ...}` mappings, as manifests write them).
fn env_names(tool: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let bad = |got: &Bound<'_, PyAny>| {
        PyTypeError::new_err(format!(
            "register_tool('{tool}'): requires_env must be a list of environment variable names, got {}",
            type_name(got)
        ))
    };
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(vec![s.to_str()?.trim().to_string()]);
    }
    if value.is_instance_of::<PyDict>() {
        return Err(bad(value));
    }
    let mut names = Vec::new();
    for item in value.try_iter().map_err(|_| bad(value))? {
        let item = item?;
        let name = if let Ok(s) = item.cast::<PyString>() {
            s.to_str()?.to_string()
        } else if let Ok(d) = item.cast::<PyDict>() {
            match d.get_item("name")? {
                Some(n) if n.is_instance_of::<PyString>() => n.extract()?,
                _ => return Err(bad(&item)),
            }
        } else {
            return Err(bad(&item));
        };
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(PyValueError::new_err(format!(
                "register_tool('{tool}'): requires_env names an empty variable"
            )));
        }
        names.push(name);
    }
    Ok(names)
}

fn require_callable(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    if obj.is_callable() {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!(
            "{what} must be callable, got {}",
            type_name(obj)
        )))
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

fn callable_label(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("__qualname__")
        .or_else(|_| obj.getattr("__name__"))
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| type_name(obj))
}

#[pymethods]
impl PluginContext {
    /// The plugin's key (its manifest name).
    #[getter]
    fn name(&self) -> &str {
        &self.key
    }

    /// The plugin's directory.
    #[getter]
    fn plugin_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The parsed manifest, as Flowly's `PluginManifest` (real or compat).
    #[getter]
    fn manifest(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.manifest_obj
            .get_or_try_init(py, || {
                manifest_object(py, &self.key, &self.dir, self.manifest.as_ref())
            })
            .map(|m| m.clone_ref(py))
    }

    /// Flowly's `register_tool`, as a plugin calls it: `requires_env` is
    /// checked for shape, stored by Flowly and ignored (gating on it is
    /// Hermes's rule, not Flowly's), and a `toolset` Flowly does not know
    /// becomes `extensions` (Flowly's
    /// `test_unknown_plugin_toolset_fails_closed_to_extensions`);
    /// `is_async` and `emoji` are accepted and ignored (awaitables are
    /// detected).
    #[pyo3(signature = (name, schema=None, handler=None, *, check_fn=None, description="", toolset=None, requires_env=None, is_async=None, emoji=None))]
    #[allow(clippy::too_many_arguments)]
    fn register_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        handler: Option<&Bound<'_, PyAny>>,
        check_fn: Option<&Bound<'_, PyAny>>,
        description: &str,
        toolset: Option<&Bound<'_, PyAny>>,
        requires_env: Option<&Bound<'_, PyAny>>,
        is_async: Option<&Bound<'_, PyAny>>,
        emoji: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = (is_async, emoji);
        let label: String = name.extract().unwrap_or_default();
        let mut extras = tool_extras(&label, toolset, requires_env)?;
        if !extras.requires_env.is_empty() {
            tracing::debug!(
                "Flowly plugin '{}' tool '{label}' declares requires_env {:?}: stored by Flowly and ignored",
                self.key,
                extras.requires_env
            );
            extras.requires_env.clear();
        }
        if !extras.toolset.is_empty() && !FLOWLY_TOOLSETS.contains(&extras.toolset.as_str()) {
            tracing::debug!(
                "Flowly plugin '{}' tool '{label}' names toolset '{}', which Flowly does not know: it joins 'extensions'",
                self.key,
                extras.toolset
            );
            extras.toolset = "extensions".into();
        }
        self.add_tool(py, name, schema, handler, check_fn, description, extras)
    }

    /// Register a web search/extract backend (a `WebSearchProvider`). It
    /// joins the provider registry once `register(ctx)` has returned, so a
    /// plugin that fails to load leaves no provider behind.
    fn register_web_search_provider(&self, provider: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = provider
            .getattr("name")
            .ok()
            .and_then(|n| n.extract::<String>().ok())
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "register_web_search_provider expects a WebSearchProvider (from flowly.agent.tools.web_providers.base) with a non-empty str name, got {}",
                    type_name(provider)
                ))
            })?;
        let base = provider
            .py()
            .import("flowly.agent.tools.web_providers.base")
            .and_then(|m| m.getattr("WebSearchProvider"));
        if let Ok(base) = base {
            if !provider.is_instance(&base)? {
                return Err(PyTypeError::new_err(format!(
                    "register_web_search_provider('{name}') expects a WebSearchProvider instance, got {}",
                    type_name(provider)
                )));
            }
        }
        if let Some((manifest, _)) = &self.manifest {
            if manifest.kind != PluginKind::Backend {
                tracing::warn!(
                    "plugin '{}' registers web provider '{name}' but its manifest says kind: {} (web providers belong in kind: backend plugins)",
                    self.key,
                    manifest.kind.as_str()
                );
            } else if !manifest.provides_web_providers.contains(&name) {
                tracing::warn!(
                    "plugin '{}' registers web provider '{name}', which its manifest's provides_web_providers does not list",
                    self.key
                );
            }
        }
        let mut state = self.state.lock().expect("context lock");
        self.ensure_open(&state)?;
        state.providers.push(provider.clone().unbind());
        Ok(())
    }

    pub(crate) fn register_hook(
        &self,
        event_name: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let name: String = event_name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_hook: event name must be a string"))?;
        require_callable(callback, "register_hook: callback")?;
        let event = super::lanes::by_name(&name).map(|r| r.lane);
        if event.is_none() {
            let valid: Vec<&str> = super::lanes::EVENTS.iter().map(|r| r.name).collect();
            tracing::warn!(
                "plugin '{}' registers unknown hook event '{}'; it will never fire (valid: {})",
                self.key,
                name,
                valid.join(", ")
            );
        }
        let entry = HookEntry {
            owner: self.key.clone(),
            label: callable_label(callback),
            priority: 0,
            callback: Arc::new(PyHook::new(callback.clone().unbind())),
            stats: Arc::new(HookStats::default()),
        };
        self.push(Registration::Hook { event, name, entry })
    }

    #[pyo3(signature = (name, handler, description="", args_hint=""))]
    pub(crate) fn register_command(
        &self,
        name: &Bound<'_, PyAny>,
        handler: &Bound<'_, PyAny>,
        description: &str,
        args_hint: &str,
    ) -> PyResult<()> {
        let raw: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_command: name must be a string"))?;
        require_callable(handler, "register_command: handler")?;
        let name = normalize_command_name(&raw);
        if name.is_empty() {
            return Err(PyValueError::new_err(
                "register_command: name must not be empty",
            ));
        }
        if RESERVED_COMMANDS.contains(&name.as_str()) {
            tracing::warn!(
                "plugin '{}' tried to register the reserved command '/{}'; refused (reserved: /new, /clear, /compact, /help)",
                self.key,
                name
            );
            return Ok(());
        }
        self.push(Registration::Command(Command {
            name,
            description: description.to_string(),
            args_hint: args_hint.to_string(),
            plugin: self.key.clone(),
            handler: Arc::new(PyCommand {
                handler: handler.clone().unbind(),
            }),
        }))
    }

    #[pyo3(signature = (name, path, description=""))]
    pub(crate) fn register_skill(
        &self,
        name: &Bound<'_, PyAny>,
        path: &Bound<'_, PyAny>,
        description: &str,
    ) -> PyResult<()> {
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_skill: name must be a string"))?;
        match skill_name_problem(&name) {
            Some(SkillNameProblem::Colon) => {
                return Err(PyValueError::new_err(format!(
                "skill name '{name}' must not contain ':'; the '{}:' namespace is added for you",
                self.key
            )))
            }
            Some(SkillNameProblem::Invalid) => {
                return Err(PyValueError::new_err(format!(
                    "skill name '{name}' is invalid: use only letters, digits, '_' and '-'"
                )))
            }
            None => {}
        }
        let resolved = crate::dialects::shared::skill_path(path, &self.dir)?;
        if !resolved.is_file() {
            return Err(PyFileNotFoundError::new_err(format!(
                "skill '{name}' of plugin '{}': no such file: {}",
                self.key,
                resolved.display()
            )));
        }
        self.push(Registration::Skill(Skill {
            name: format!("{}:{}", self.key, name),
            plugin: self.key.clone(),
            description: description.to_string(),
            path: resolved,
        }))
    }

    fn __repr__(&self) -> String {
        format!("<PluginContext plugin={:?}>", self.key)
    }
}

/// `ctx.manifest`: Flowly's `PluginManifest` built with keyword arguments
/// (only those its dataclass has, so an upstream field change cannot shift
/// values), or a plain namespace when the installed Flowly lacks the class.
fn manifest_object(
    py: Python<'_>,
    key: &str,
    dir: &Path,
    manifest: Option<&(Manifest, String)>,
) -> PyResult<Py<PyAny>> {
    let kwargs = PyDict::new(py);
    let path = py.import("pathlib")?.getattr("Path")?.call1((dir,))?;
    match manifest {
        Some((m, source)) => {
            let requires_env = PyList::empty(py);
            for r in &m.requires_env {
                if r.description.is_empty() {
                    requires_env.append(&r.name)?;
                } else {
                    let entry = PyDict::new(py);
                    entry.set_item("name", &r.name)?;
                    entry.set_item("description", &r.description)?;
                    requires_env.append(entry)?;
                }
            }
            kwargs.set_item("name", &m.name)?;
            kwargs.set_item("version", &m.version)?;
            kwargs.set_item("description", &m.description)?;
            kwargs.set_item("author", &m.author)?;
            kwargs.set_item("kind", m.kind.as_str())?;
            kwargs.set_item("manifest_version", m.manifest_version)?;
            kwargs.set_item("requires_env", requires_env)?;
            kwargs.set_item("provides_tools", m.provides_tools.clone())?;
            kwargs.set_item("provides_hooks", m.provides_hooks.clone())?;
            kwargs.set_item("provides_web_providers", m.provides_web_providers.clone())?;
            kwargs.set_item("source", source)?;
        }
        None => {
            kwargs.set_item("name", key)?;
            kwargs.set_item("source", "")?;
        }
    }
    kwargs.set_item("path", path)?;
    kwargs.set_item("key", key)?;
    let class = py
        .import("flowly.plugins.manifest")
        .and_then(|m| m.getattr("PluginManifest"));
    let Ok(class) = class else {
        let namespace = py.import("types")?.getattr("SimpleNamespace")?;
        return Ok(namespace.call((), Some(&kwargs))?.unbind());
    };
    let dataclasses = py.import("dataclasses")?;
    if dataclasses
        .getattr("is_dataclass")?
        .call1((&class,))?
        .is_truthy()?
    {
        let mut known = Vec::new();
        for field in dataclasses
            .getattr("fields")?
            .call1((&class,))?
            .try_iter()?
        {
            known.push(field?.getattr("name")?.extract::<String>()?);
        }
        let filtered = PyDict::new(py);
        for (k, v) in kwargs.iter() {
            if known.contains(&k.extract::<String>()?) {
                filtered.set_item(k, v)?;
            }
        }
        return Ok(class.call((), Some(&filtered))?.unbind());
    }
    Ok(class.call((), Some(&kwargs))?.unbind())
}

/// Unwrap the schema shapes `register_tool` accepts into (parameters, description).
pub fn normalize_schema(schema: &Value) -> (Value, String) {
    let empty = || json!({"type": "object", "properties": {}});
    let description_of = |m: &Map<String, Value>| {
        m.get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let Value::Object(map) = schema else {
        return (empty(), String::new());
    };
    if map.get("type").and_then(Value::as_str) == Some("function") {
        if let Some(Value::Object(function)) = map.get("function") {
            let params = function
                .get("parameters")
                .filter(|p| p.is_object())
                .cloned()
                .unwrap_or_else(empty);
            return (params, description_of(function));
        }
    }
    if let Some(params @ Value::Object(_)) = map.get("parameters") {
        return (params.clone(), description_of(map));
    }
    if map.contains_key("properties") || map.get("type").and_then(Value::as_str) == Some("object") {
        return (schema.clone(), description_of(map));
    }
    (empty(), description_of(map))
}

#[cfg(test)]
mod tests {
    use super::normalize_schema;
    use serde_json::json;

    #[test]
    fn schema_shapes() {
        let inner = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            normalize_schema(&json!({"parameters": inner, "description": "d"})),
            (inner.clone(), "d".into())
        );
        assert_eq!(
            normalize_schema(
                &json!({"type": "function", "function": {"parameters": inner, "description": "f"}})
            ),
            (inner.clone(), "f".into())
        );
        assert_eq!(normalize_schema(&inner), (inner.clone(), String::new()));
        assert_eq!(
            normalize_schema(&json!({"weird": 1})).0,
            json!({"type": "object", "properties": {}})
        );
    }
}
