//! The hook contexts of `flowly.agent.hooks` and Flowly's calling and
//! answer conventions: `callback(ctx)`, sync or async; `BlockAction`,
//! `SkipAction`, `RewriteAction`, a `str`, or `{"context": str}` answers.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyString};

use super::classes;
use crate::core::hooks::{
    CallState, HookAction, HookCallback, HookError, HookEvent, HookPayload, HookReturn,
    ToolCallContext,
};
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::value::to_json;
use crate::runtime::{plugin_error, try_attach};

/// The Python side of one tool call: the params dict the handler and every
/// hook share (so a hook's in-place edit reaches the handler, as in Flowly)
/// and the `ToolHookContext`, built on first use.
struct ToolState {
    params: Py<PyDict>,
    context: Option<Py<PyAny>>,
    /// The (stage, revision) the Python context last showed.
    synced: (Option<HookEvent>, u64),
    /// The objects last written into the context's `result` and
    /// `duration_ms`, to tell when showing a stage needs no write.
    written: [Option<Py<PyAny>>; 2],
}

/// The params of a call as a Python dict, shared for the call's lifetime.
pub fn params_dict<'py>(
    py: Python<'py>,
    ctx: &mut ToolCallContext,
) -> PyResult<Bound<'py, PyDict>> {
    if let Some(state) = ctx.dialect.get_mut::<ToolState>() {
        return Ok(state.params.bind(py).clone());
    }
    // Another state (an isolated plugin's hooks) may hold edited arguments.
    let edited = ctx.dialect.edited_params();
    let dict =
        pythonize::pythonize(py, edited.as_ref().unwrap_or(&ctx.params))?.cast_into::<PyDict>()?;
    ctx.dialect.set(ToolState {
        params: dict.clone().unbind(),
        context: None,
        synced: (None, 0),
        written: [None, None],
    });
    Ok(dict)
}

impl CallState for ToolState {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn edited_params(&mut self) -> Option<serde_json::Map<String, serde_json::Value>> {
        try_attach(|py| match to_json(self.params.bind(py).as_any()) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!("a hook left the call's params unusable ({e}); the handler gets them as they were");
                None
            }
        })
        .ok()
        .flatten()
    }
}

/// A cached Python context for a non-tool payload.
struct ObjectState {
    context: Py<PyAny>,
    stage: Option<HookEvent>,
}

impl CallState for ObjectState {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

fn tool_context<'py>(py: Python<'py>, ctx: &mut ToolCallContext) -> PyResult<Bound<'py, PyAny>> {
    let params = params_dict(py, ctx)?;
    let shown = (ctx.stage, ctx.revision);
    let state = ctx
        .dialect
        .get_mut::<ToolState>()
        .expect("params_dict set the state");
    if let Some(obj) = &state.context {
        let obj = obj.bind(py).clone();
        if state.synced != shown {
            let [result, duration] = &mut state.written;
            let text = ctx.result.as_deref();
            show(
                &obj,
                intern!(py, "result"),
                result,
                |shown| match text {
                    None => shown.is_none(),
                    Some(t) => shown
                        .cast::<PyString>()
                        .is_ok_and(|s| s.to_str().is_ok_and(|s| s == t)),
                },
                || match text {
                    Some(t) => PyString::new(py, t).into_any(),
                    None => py.None().into_bound(py),
                },
            )?;
            let ms = ctx.duration_ms;
            show(
                &obj,
                intern!(py, "duration_ms"),
                duration,
                |shown| {
                    shown
                        .cast::<PyFloat>()
                        .is_ok_and(|f| f.value().to_bits() == ms.to_bits())
                },
                || PyFloat::new(py, ms).into_any(),
            )?;
            let success = match ctx.success {
                Some(b) => PyBool::new(py, b).to_owned().into_any(),
                None => py.None().into_bound(py),
            };
            let name = intern!(py, "success");
            if !obj.getattr(name).is_ok_and(|now| now.is(&success)) {
                obj.setattr(name, success)?;
            }
            state.synced = shown;
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
        ctx.result.as_deref(),
        ctx.duration_ms,
        ctx.success,
    );
    let obj = classes(py)?.tool_ctx.bind(py).call1(args)?;
    let state = ctx.dialect.get_mut::<ToolState>().expect("state set");
    state.context = Some(obj.clone().unbind());
    state.synced = shown;
    Ok(obj)
}

/// Make `obj.<name>` show a value: left alone when it still holds the very
/// object last written there (`last`) and that object shows the value
/// (`shows`), as when a stage changes and the pipeline's value did not;
/// written (and remembered) otherwise, so a hook's own assignment is
/// replaced by the pipeline's value as on every stage.
fn show<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    last: &mut Option<Py<PyAny>>,
    shows: impl FnOnce(&Bound<'py, PyAny>) -> bool,
    make: impl FnOnce() -> Bound<'py, PyAny>,
) -> PyResult<()> {
    let py = obj.py();
    if let Some(previous) = last.as_ref().map(|p| p.bind(py)) {
        if shows(previous) && obj.getattr(name).is_ok_and(|now| now.is(previous)) {
            return Ok(());
        }
    }
    let value = make();
    obj.setattr(name, &value)?;
    *last = Some(value.unbind());
    Ok(())
}

/// The context object built for this payload at this stage, if any.
fn reuse<'py>(
    py: Python<'py>,
    dialect: &mut crate::core::hooks::DialectState,
    stage: Option<HookEvent>,
) -> Option<Bound<'py, PyAny>> {
    let state = dialect.get_mut::<ObjectState>()?;
    (state.stage == stage).then(|| state.context.bind(py).clone())
}

/// Keep `obj` for the other callbacks of this event.
fn remember<'py>(
    dialect: &mut crate::core::hooks::DialectState,
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
    let classes = classes(py)?;
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
        // Flowly names only the seed's events; loop points never reach it.
        HookPayload::Loop(_) => Err(pyo3::exceptions::PyTypeError::new_err(
            "a Flowly hook is never subscribed to a loop point",
        )),
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
    /// The callback's `__plughost_tools__`, read once (see [`HookCallback::tools`]).
    tools: Option<Vec<String>>,
    /// The callback is plughost's native call log (tool-audit's
    /// `post_tool_call` under plughost): recorded without entering Python.
    native_log: Option<crate::runtime::recorder::LogHandle>,
}

impl PyHook {
    pub fn new(callback: Py<PyAny>) -> PyHook {
        let (tools, native_log) = try_attach(|py| {
            let bound = callback.bind(py);
            let native = bound
                .cast::<crate::runtime::recorder::ToolCallLog>()
                .ok()
                .map(|log| log.get().handle());
            (declared_tools(bound), native)
        })
        .unwrap_or((None, None));
        PyHook {
            callback,
            tools,
            native_log,
        }
    }
}

/// A callback's `__plughost_tools__`: a tool name or a collection of them
/// (another host ignores the attribute); anything else declares nothing.
fn declared_tools(callback: &Bound<'_, PyAny>) -> Option<Vec<String>> {
    let declared = callback.getattr("__plughost_tools__").ok()?;
    if let Ok(one) = declared.extract::<String>() {
        return Some(vec![one]);
    }
    let mut names = Vec::new();
    for item in declared.try_iter().ok()? {
        names.push(item.ok()?.extract::<String>().ok()?);
    }
    Some(names)
}

/// A short, readable description of an answer, for the wrong-shape log.
fn shape_of(ret: &Bound<'_, PyAny>) -> String {
    let ty = ret
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into());
    let mut text = ret.repr().map(|r| r.to_string()).unwrap_or_default();
    if text.len() > 60 {
        let cut = (0..=60)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    format!("a {ty} ({text})")
}

/// Read a callback's answer the Flowly way: each event honours its own
/// action types; `None` means "nothing to do"; any other answer is a wrong
/// shape (counted and logged by the firing function, then ignored, as
/// Flowly ignores it).
fn interpret(
    py: Python<'_>,
    event: HookEvent,
    ret: &Bound<'_, PyAny>,
) -> Result<HookAction, HookError> {
    if ret.is_none() {
        return Ok(HookAction::Continue);
    }
    let classes = classes(py).map_err(|e| HookError::Raised(plugin_error(py, &e)))?;
    let attr_text = |name: &str| -> Result<String, HookError> {
        ret.getattr(name)
            .and_then(|v| v.str().map(|s| s.to_string()))
            .map_err(|e| HookError::Raised(plugin_error(py, &e)))
    };
    let is = |cls: &Py<PyAny>| ret.is_instance(cls.bind(py)).unwrap_or(false);
    let wrong = || {
        Err(HookError::WrongShape(
            shape_of(ret),
            super::lanes::name_of(event).to_string(),
        ))
    };
    match event {
        HookEvent::ToolGuard if is(&classes.block) => Ok(HookAction::Block(attr_text("message")?)),
        HookEvent::InboundGate if is(&classes.skip) => Ok(HookAction::Skip(attr_text("reason")?)),
        HookEvent::InboundGate if is(&classes.rewrite) => {
            Ok(HookAction::Rewrite(attr_text("text")?))
        }
        HookEvent::ResultRewrite | HookEvent::ExecOutputRewrite => match ret.cast::<PyString>() {
            Ok(s) => Ok(HookAction::Replace(s.to_string())),
            Err(_) => wrong(),
        },
        HookEvent::PromptContext => {
            if let Ok(s) = ret.cast::<PyString>() {
                Ok(HookAction::Inject(s.to_string()))
            } else if let Ok(d) = ret.cast::<PyDict>() {
                match d.get_item("context").ok().flatten() {
                    Some(c) => Ok(HookAction::Inject(
                        c.str().map(|s| s.to_string()).unwrap_or_default(),
                    )),
                    None => wrong(),
                }
            } else {
                wrong()
            }
        }
        _ => wrong(),
    }
}

fn raised(py: Python<'_>, e: &PyErr) -> HookError {
    HookError::Raised(plugin_error(py, e))
}

impl HookCallback for PyHook {
    fn event_name(&self, event: HookEvent) -> Option<String> {
        Some(super::lanes::name_of(event).to_string())
    }

    fn tools(&self) -> Option<&[String]> {
        self.tools.as_deref()
    }

    fn native(&self, event: HookEvent) -> bool {
        self.native_log.is_some() && event == HookEvent::ToolDone
    }

    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        if let (Some(log), HookEvent::ToolDone, HookPayload::Tool(ctx)) =
            (&self.native_log, event, &payload)
        {
            log.record(ctx);
            return HookReturn::Ready(Ok(HookAction::Continue));
        }
        let called = try_attach(|py| {
            let called =
                context_object(py, payload).and_then(|ctx| self.callback.bind(py).call1((ctx,)));
            match called {
                Err(e) => HookReturn::Ready(Err(raised(py, &e))),
                Ok(ret) => match bridge::resolve(py, ret) {
                    Awaited::Ready(Ok(v)) => HookReturn::Ready(interpret(py, event, v.bind(py))),
                    Awaited::Ready(Err(e)) => HookReturn::Ready(Err(raised(py, &e))),
                    Awaited::Pending(task) => HookReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        try_attach(|py| match r {
                            Ok(v) => interpret(py, event, v.bind(py)),
                            Err(e) => Err(raised(py, &e)),
                        })
                        .unwrap_or_else(|e| Err(HookError::NotRun(e.to_string())))
                    })),
                },
            }
        });
        called.unwrap_or_else(|e| HookReturn::Ready(Err(HookError::NotRun(e.to_string()))))
    }
}
