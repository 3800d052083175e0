//! `flowly.plugins.PluginContext`: the surface a Flowly plugin's
//! `register(ctx)` touches, and the schema shapes `register_tool` accepts.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{json, Map, Value};

use super::handlers::{PyCommand, PyTool};
use super::hooks::PyHook;
use crate::hooks::{HookEntry, HookEvent, HookStats};
use crate::registry::{
    normalize_command_name, Command, Registration, Skill, Tool, ToolSpec, RESERVED_COMMANDS,
};

struct ContextState {
    open: bool,
    pending: Vec<Registration>,
}

/// `flowly.plugins.PluginContext`: the only surface a plugin touches.
#[pyclass(module = "flowly.plugins", name = "PluginContext", frozen)]
pub struct PluginContext {
    key: String,
    dir: PathBuf,
    state: Mutex<ContextState>,
}

impl PluginContext {
    pub fn new(key: &str, dir: &Path) -> PluginContext {
        PluginContext {
            key: key.to_string(),
            dir: dir.to_path_buf(),
            state: Mutex::new(ContextState {
                open: true,
                pending: Vec::new(),
            }),
        }
    }

    /// Close registration and take what was registered.
    pub fn finish(&self) -> Vec<Registration> {
        let mut state = self.state.lock().expect("context lock");
        state.open = false;
        std::mem::take(&mut state.pending)
    }

    fn push(&self, registration: Registration) -> PyResult<()> {
        let mut state = self.state.lock().expect("context lock");
        if !state.open {
            return Err(PyRuntimeError::new_err(format!(
                "plugin '{}' registered something after register(ctx) returned; register everything inside register(ctx)",
                self.key
            )));
        }
        state.pending.push(registration);
        Ok(())
    }
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

    #[pyo3(signature = (name, schema=None, handler=None, *, check_fn=None, description=""))]
    pub(crate) fn register_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        handler: Option<&Bound<'_, PyAny>>,
        check_fn: Option<&Bound<'_, PyAny>>,
        description: &str,
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
        )?;
        let spec = ToolSpec {
            name,
            description,
            parameters,
            plugin: self.key.clone(),
        };
        self.push(Registration::Tool(Tool::new(spec, Arc::new(py_tool))))
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
        let event = HookEvent::from_name(&name);
        if event.is_none() {
            let valid: Vec<&str> = HookEvent::ALL.iter().map(|e| e.name()).collect();
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
        if name.contains(':') {
            return Err(PyValueError::new_err(format!(
                "skill name '{name}' must not contain ':'; the '{}:' namespace is added for you",
                self.key
            )));
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(PyValueError::new_err(format!(
                "skill name '{name}' is invalid: use only letters, digits, '_' and '-'"
            )));
        }
        let fspath = path.py().import("os")?.getattr("fspath")?.call1((path,))?;
        let given: PathBuf = fspath.extract::<String>().map(PathBuf::from).map_err(|_| {
            PyTypeError::new_err("register_skill: path must be a str or os.PathLike")
        })?;
        let mut resolved = if given.is_absolute() {
            given.clone()
        } else {
            self.dir.join(&given)
        };
        if resolved.is_dir() {
            resolved = resolved.join("SKILL.md");
        }
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
