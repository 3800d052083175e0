//! The Flowly plugin API: `register(ctx)` with `PluginContext`, the hook
//! context classes of `flowly.agent.hooks`, and their return conventions.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::{json, Map, Value};

use crate::hooks::{
    HookAction, HookCallback, HookEntry, HookError, HookEvent, HookPayload, HookReturn, HookStats,
    ToolCallContext,
};
use crate::python::bridge::{self, Awaited};
use crate::python::handlers::{PyCommand, PyTool};
use crate::python::runtime;
use crate::registry::{normalize_command_name, Command, Skill, Tool, ToolSpec, RESERVED_COMMANDS};

/// One contribution made inside `register(ctx)`, committed only if
/// `register` returns normally (so a failing plugin leaves nothing behind).
pub enum Registration {
    Tool(Tool),
    Hook {
        event: Option<HookEvent>,
        name: String,
        entry: HookEntry,
    },
    Command(Command),
    Skill(Skill),
}

struct ContextState {
    open: bool,
    pending: Vec<Registration>,
}

/// `flowly.plugins.PluginContext`: the only surface a plugin touches.
#[pyclass(module = "flowly.plugins", name = "PluginContext")]
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

    #[pyo3(signature = (name, schema=None, handler=None, *, check_fn=None, description=String::new()))]
    fn register_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        handler: Option<&Bound<'_, PyAny>>,
        check_fn: Option<&Bound<'_, PyAny>>,
        description: String,
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
            Some(s) => pythonize::depythonize(s).map_err(|e| {
                PyValueError::new_err(format!(
                    "register_tool('{name}'): schema is not JSON-like: {e}"
                ))
            })?,
        };
        let (parameters, schema_description) = normalize_schema(&schema_value);
        let description = if description.is_empty() {
            schema_description
        } else {
            description
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

    fn register_hook(
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
            callback: Arc::new(PyHook {
                callback: callback.clone().unbind(),
            }),
            stats: Arc::new(HookStats::default()),
        };
        self.push(Registration::Hook { event, name, entry })
    }

    #[pyo3(signature = (name, handler, description=String::new(), args_hint=String::new()))]
    fn register_command(
        &self,
        name: &Bound<'_, PyAny>,
        handler: &Bound<'_, PyAny>,
        description: String,
        args_hint: String,
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
            description,
            args_hint,
            plugin: self.key.clone(),
            handler: Arc::new(PyCommand {
                handler: handler.clone().unbind(),
            }),
        }))
    }

    #[pyo3(signature = (name, path, description=String::new()))]
    fn register_skill(
        &self,
        name: &Bound<'_, PyAny>,
        path: &Bound<'_, PyAny>,
        description: String,
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
            description,
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

// ── Hook contexts ────────────────────────────────────────────────

/// The Python side of one tool call: the params dict the handler and every
/// hook share (so a hook's in-place edit reaches the handler, as in Flowly)
/// and the `ToolHookContext`, built on first use.
struct ToolState {
    params: Py<PyDict>,
    context: Option<Py<PyAny>>,
    synced: Option<HookEvent>,
}

/// The params of a call as a Python dict, shared for the call's lifetime.
pub fn params_dict<'py>(
    py: Python<'py>,
    ctx: &mut ToolCallContext,
) -> PyResult<Bound<'py, PyDict>> {
    if let Some(state) = ctx.dialect.get_mut::<ToolState>() {
        return Ok(state.params.bind(py).clone());
    }
    let dict = pythonize::pythonize(py, &ctx.params)?.cast_into::<PyDict>()?;
    ctx.dialect.set(ToolState {
        params: dict.clone().unbind(),
        context: None,
        synced: None,
    });
    Ok(dict)
}

/// A cached Python context for a non-tool payload.
struct ObjectState {
    context: Py<PyAny>,
    stage: Option<HookEvent>,
}

fn tool_context<'py>(py: Python<'py>, ctx: &mut ToolCallContext) -> PyResult<Bound<'py, PyAny>> {
    let params = params_dict(py, ctx)?;
    let stage = ctx.stage;
    let (result, duration_ms, success) = (ctx.result.clone(), ctx.duration_ms, ctx.success);
    let state = ctx
        .dialect
        .get_mut::<ToolState>()
        .expect("params_dict set the state");
    if let Some(obj) = &state.context {
        let obj = obj.bind(py).clone();
        if state.synced != stage {
            obj.setattr(intern!(py, "result"), result)?;
            obj.setattr(intern!(py, "duration_ms"), duration_ms)?;
            obj.setattr(intern!(py, "success"), success)?;
            state.synced = stage;
        }
        return Ok(obj);
    }
    // Positional, in the field order of Flowly's ToolHookContext
    // (session_id, task_id, tool_name, params, tool_call_id, result,
    // duration_ms, success): cheaper than building a kwargs dict per call.
    let args = (
        &ctx.session_id,
        &ctx.task_id,
        &ctx.tool_name,
        params,
        &ctx.tool_call_id,
        result,
        duration_ms,
        success,
    );
    let obj = runtime().hooks.tool_ctx.bind(py).call1(args)?;
    let state = ctx.dialect.get_mut::<ToolState>().expect("state set");
    state.context = Some(obj.clone().unbind());
    state.synced = stage;
    Ok(obj)
}

/// The context object built for this payload at this stage, if any.
fn reuse<'py>(
    py: Python<'py>,
    dialect: &mut crate::hooks::DialectState,
    stage: Option<HookEvent>,
) -> Option<Bound<'py, PyAny>> {
    let state = dialect.get_mut::<ObjectState>()?;
    (state.stage == stage).then(|| state.context.bind(py).clone())
}

/// Keep `obj` for the other callbacks of this event.
fn remember<'py>(
    dialect: &mut crate::hooks::DialectState,
    stage: Option<HookEvent>,
    obj: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    dialect.set(ObjectState {
        context: obj.clone().unbind(),
        stage,
    });
    Ok(obj)
}

/// A kwargs dict with interned keys.
macro_rules! kwargs {
    ($py:expr; $($key:literal => $value:expr),* $(,)?) => {{
        let dict = PyDict::new($py);
        $( dict.set_item(intern!($py, $key), $value)?; )*
        dict
    }};
}

fn context_object<'py>(py: Python<'py>, payload: HookPayload<'_>) -> PyResult<Bound<'py, PyAny>> {
    let classes = &runtime().hooks;
    let to_py = |v: &dyn erased::Ser| v.to_py(py);
    match payload {
        HookPayload::Tool(ctx) => tool_context(py, ctx),
        HookPayload::Llm(ctx) => {
            if let Some(obj) = reuse(py, &mut ctx.dialect, ctx.stage) {
                return Ok(obj);
            }
            let kwargs = kwargs!(py;
                "session_id" => &ctx.session_id,
                "task_id" => &ctx.task_id,
                "model" => &ctx.model,
                "messages" => to_py(&ctx.messages)?,
                "tools" => to_py(&ctx.tools)?,
                "system" => &ctx.system,
                "user_message" => &ctx.user_message,
                "response" => to_py(&ctx.response)?,
                "assistant_message" => &ctx.assistant_message,
                "usage" => to_py(&ctx.usage)?,
                "truncated" => ctx.truncated,
                "interrupted" => ctx.interrupted,
            );
            remember(
                &mut ctx.dialect,
                ctx.stage,
                classes.llm_ctx.bind(py).call((), Some(&kwargs))?,
            )
        }
        HookPayload::Session(ctx) => {
            if let Some(obj) = reuse(py, &mut ctx.dialect, ctx.stage) {
                return Ok(obj);
            }
            let kwargs = kwargs!(py;
                "session_id" => &ctx.session_id,
                "task_id" => &ctx.task_id,
                "model" => &ctx.model,
                "platform" => &ctx.platform,
                "completed" => ctx.completed,
                "interrupted" => ctx.interrupted,
            );
            remember(
                &mut ctx.dialect,
                ctx.stage,
                classes.session_ctx.bind(py).call((), Some(&kwargs))?,
            )
        }
        HookPayload::Subagent(ctx) => {
            if let Some(obj) = reuse(py, &mut ctx.dialect, ctx.stage) {
                return Ok(obj);
            }
            let kwargs = kwargs!(py;
                "session_id" => &ctx.session_id,
                "task_id" => &ctx.task_id,
                "subagent_id" => &ctx.subagent_id,
                "reason" => &ctx.reason,
            );
            remember(
                &mut ctx.dialect,
                ctx.stage,
                classes.subagent_ctx.bind(py).call((), Some(&kwargs))?,
            )
        }
        HookPayload::Gateway(ctx) => {
            if let Some(obj) = reuse(py, &mut ctx.dialect, ctx.stage) {
                return Ok(obj);
            }
            // The inbound message: an object with attributes, as Flowly's is.
            let event = kwargs!(py;
                "content" => &ctx.event.content,
                "channel" => &ctx.event.channel,
                "sender_id" => &ctx.event.sender_id,
                "session_key" => &ctx.event.session_key,
                "metadata" => to_py(&ctx.event.metadata)?,
            );
            let kwargs = kwargs!(py;
                "session_id" => &ctx.session_id,
                "task_id" => &ctx.task_id,
                "event" => classes.namespace.bind(py).call((), Some(&event))?,
                "gateway" => &ctx.gateway,
                "session_store" => py.None(),
            );
            remember(
                &mut ctx.dialect,
                ctx.stage,
                classes.gateway_ctx.bind(py).call((), Some(&kwargs))?,
            )
        }
    }
}

/// Serialising any serde value into Python without naming its type.
mod erased {
    use pyo3::prelude::*;
    pub trait Ser {
        fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            Ok(pythonize::pythonize(py, self)?)
        }
    }
}

/// A Python hook callback: `callback(ctx)`, sync or async.
pub struct PyHook {
    callback: Py<PyAny>,
}

/// Read a callback's return the Flowly way: each event honours its own
/// action types; anything else is an observation and ignored.
fn interpret(
    py: Python<'_>,
    event: HookEvent,
    ret: &Bound<'_, PyAny>,
) -> Result<HookAction, HookError> {
    if ret.is_none() {
        return Ok(HookAction::Continue);
    }
    let classes = &runtime().hooks;
    let attr_text = |name: &str| -> Result<String, HookError> {
        ret.getattr(name)
            .and_then(|v| v.str().map(|s| s.to_string()))
            .map_err(|e| HookError(crate::python::describe(py, &e)))
    };
    let is = |cls: &Py<PyAny>| ret.is_instance(cls.bind(py)).unwrap_or(false);
    Ok(match event {
        HookEvent::PreToolCall if is(&classes.block) => HookAction::Block(attr_text("message")?),
        HookEvent::PreGatewayDispatch if is(&classes.skip) => {
            HookAction::Skip(attr_text("reason")?)
        }
        HookEvent::PreGatewayDispatch if is(&classes.rewrite) => {
            HookAction::Rewrite(attr_text("text")?)
        }
        HookEvent::TransformToolResult | HookEvent::TransformTerminalOutput => {
            match ret.cast::<PyString>() {
                Ok(s) => HookAction::Replace(s.to_string()),
                Err(_) => HookAction::Continue,
            }
        }
        HookEvent::PreLlmCall => {
            if let Ok(s) = ret.cast::<PyString>() {
                HookAction::Inject(s.to_string())
            } else if let Ok(d) = ret.cast::<PyDict>() {
                match d.get_item("context").ok().flatten() {
                    Some(c) => {
                        HookAction::Inject(c.str().map(|s| s.to_string()).unwrap_or_default())
                    }
                    None => HookAction::Continue,
                }
            } else {
                HookAction::Continue
            }
        }
        _ => HookAction::Continue,
    })
}

impl HookCallback for PyHook {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        crate::python::attach(|py| {
            let called =
                context_object(py, payload).and_then(|ctx| self.callback.bind(py).call1((ctx,)));
            match called {
                Err(e) => HookReturn::Ready(Err(HookError(crate::python::describe(py, &e)))),
                Ok(ret) => match bridge::resolve(py, ret) {
                    Awaited::Ready(Ok(v)) => HookReturn::Ready(interpret(py, event, v.bind(py))),
                    Awaited::Ready(Err(e)) => {
                        HookReturn::Ready(Err(HookError(crate::python::describe(py, &e))))
                    }
                    Awaited::Pending(task) => HookReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        crate::python::attach(|py| match r {
                            Ok(v) => interpret(py, event, v.bind(py)),
                            Err(e) => Err(HookError(crate::python::describe(py, &e))),
                        })
                    })),
                },
            }
        })
    }
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
