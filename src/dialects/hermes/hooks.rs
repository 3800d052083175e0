//! Hermes's hook conventions: `callback(**kwargs)` with the keywords Hermes
//! passes for the event (only those a narrow callback declares; all of
//! them to one taking `**kwargs`), `async def` callbacks awaited, and dict
//! answers: `pre_tool_call` `{"action": "block", "message"}` (and
//! `"modify"`, merged into the call's arguments), `pre_llm_call`
//! `{"context"}` or a string, `pre_gateway_dispatch` skip/rewrite/allow,
//! `result_rewrite` and `exec_output_rewrite` strings (`transform_llm_output` included). Anything else is ignored, as Hermes ignores it.
//! A failing `pre_tool_call` callback blocks the call with Hermes's message
//! (fail closed, as its row says: [`super::lanes::EVENTS`]).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};

use crate::core::hooks::{
    EventRow, HookAction, HookCallback, HookError, HookEvent, HookPayload, HookReturn, LaneId,
};
use crate::dialects::flowly::hooks::params_dict;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, runtime, try_attach};

use super::tool_names;

/// The arguments of a tool call as a Hermes hook sees them: the call's
/// shared dict itself when Hermes names the tool as plughost does, else a
/// copy in Hermes's shape ([`tool_names`]) whose edits (`modify`, or in
/// place) are carried back into the shared dict after a `pre_tool_call`.
struct ToolView {
    /// plughost's name of the tool.
    tool: String,
    /// The call's arguments, shared by every dialect's hooks and the handler.
    shared: Py<PyDict>,
    /// What the hook gets (the shared dict, or the Hermes-shaped copy).
    shown: Py<PyDict>,
}

impl ToolView {
    fn new(py: Python<'_>, ctx: &mut crate::core::hooks::ToolCallContext) -> PyResult<ToolView> {
        let shared = params_dict(py, ctx)?;
        let shown = if tool_names::translated(&ctx.tool_name) {
            let plughost = json_map(shared.as_any())?;
            let hermes = tool_names::to_hermes(&ctx.tool_name, &plughost);
            pythonize::pythonize(py, &hermes)?.cast_into::<PyDict>()?
        } else {
            shared.clone()
        };
        Ok(ToolView {
            tool: ctx.tool_name.clone(),
            shared: shared.unbind(),
            shown: shown.unbind(),
        })
    }

    /// Carry the hook's edits of a Hermes-shaped copy back into the call's
    /// arguments, in plughost's shape; an edit plughost's tool cannot
    /// follow (`patch` switched to V4A mode) blocks the call, saying so.
    fn write_back(&self, py: Python<'_>) -> Result<(), HookError> {
        if self.shown.is(&self.shared) {
            return Ok(());
        }
        let shown = json_map(self.shown.bind(py).as_any()).map_err(|e| raised(py, &e))?;
        let back = tool_names::to_plughost(&self.tool, &shown).map_err(|no| {
            HookError::WrongShape(
                format!(
                    "arguments plughost's {} cannot take ({} = {})",
                    self.tool, no.key, no.value
                ),
                super::lanes::name_of(HookEvent::ToolGuard).to_string(),
            )
        })?;
        let shared = self.shared.bind(py);
        let current = json_map(shared.as_any()).map_err(|e| raised(py, &e))?;
        if current != back {
            let new = pythonize::pythonize(py, &back)
                .map_err(|e| raised(py, &e.into()))?
                .cast_into::<PyDict>()
                .map_err(|e| raised(py, &e.into()))?;
            shared.clear();
            shared
                .update(new.as_mapping())
                .map_err(|e| raised(py, &e))?;
        }
        Ok(())
    }
}

fn json_map(v: &Bound<'_, PyAny>) -> PyResult<serde_json::Map<String, serde_json::Value>> {
    match crate::runtime::value::to_json(v) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(pyo3::exceptions::PyTypeError::new_err(
            "the call's arguments are not a dict",
        )),
        Err(e) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "the call's arguments are not JSON-like: {e}"
        ))),
    }
}

/// `telemetry_schema_version` Hermes adds to every hook call
/// (`hermes_cli/middleware.py` `OBSERVER_SCHEMA_VERSION`).
const OBSERVER_SCHEMA_VERSION: &str = "hermes.observer.v1";

/// The platform plughost reports where a context has none (`cli`, as
/// Hermes's own command line).
const PLATFORM: &str = "cli";

/// A Hermes hook callback.
pub struct HermesHook {
    callback: Py<PyAny>,
    /// Keywords it declares; `None` when it takes `**kwargs`.
    accepted: Option<Py<PyFrozenSet>>,
    /// The row of the hook name it was registered by (how it fails).
    row: Option<&'static EventRow>,
}

impl HermesHook {
    pub fn new(
        py: Python<'_>,
        callback: Py<PyAny>,
        row: Option<&'static EventRow>,
    ) -> PyResult<HermesHook> {
        let accepted = runtime()
            .accepted_keywords
            .bind(py)
            .call1((callback.bind(py),))?;
        let accepted = if accepted.is_none() {
            None
        } else {
            Some(accepted.cast_into::<PyFrozenSet>()?.unbind())
        };
        Ok(HermesHook {
            callback,
            accepted,
            row,
        })
    }
}

/// The keyword arguments Hermes passes for `event`, built from `payload`.
fn kwargs<'py>(
    py: Python<'py>,
    event: HookEvent,
    payload: HookPayload<'_>,
    view: Option<&ToolView>,
) -> PyResult<Bound<'py, PyDict>> {
    let kw = PyDict::new(py);
    let to_py =
        |v: &serde_json::Value| -> PyResult<Bound<'py, PyAny>> { Ok(pythonize::pythonize(py, v)?) };
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    match payload {
        HookPayload::Tool(ctx) => match view {
            Some(view) => tool_kwargs(py, &kw, event, ctx, view)?,
            None => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "a tool event without its arguments",
                ))
            }
        },
        HookPayload::Llm(ctx) => llm_kwargs(py, &kw, event, ctx)?,
        HookPayload::Session(ctx) => {
            kw.set_item("session_id", opt(&ctx.session_id))?;
            let platform = if ctx.platform.is_empty() {
                PLATFORM
            } else {
                ctx.platform.as_str()
            };
            kw.set_item("platform", platform)?;
            if matches!(event, HookEvent::SessionOpened | HookEvent::TurnClosed) {
                kw.set_item("model", &ctx.model)?;
            }
            if event == HookEvent::TurnClosed {
                kw.set_item("completed", ctx.completed)?;
                kw.set_item("interrupted", ctx.interrupted)?;
            }
        }
        HookPayload::Subagent(ctx) if event == HookEvent::SubagentBegun => {
            kw.set_item("parent_session_id", opt(&ctx.session_id))?;
            kw.set_item("parent_turn_id", py.None())?;
            kw.set_item("parent_subagent_id", py.None())?;
            kw.set_item("child_session_id", &ctx.subagent_id)?;
            kw.set_item("child_subagent_id", &ctx.subagent_id)?;
            kw.set_item("child_role", py.None())?;
            kw.set_item("child_goal", &ctx.goal)?;
        }
        HookPayload::Subagent(ctx) => {
            kw.set_item("parent_session_id", opt(&ctx.session_id))?;
            kw.set_item("child_subagent_id", &ctx.subagent_id)?;
            kw.set_item("child_role", py.None())?;
            kw.set_item("child_summary", py.None())?;
            kw.set_item("child_status", &ctx.reason)?;
            kw.set_item("tool_call_history", pyo3::types::PyList::empty(py))?;
            kw.set_item("duration_ms", py.None())?;
        }
        HookPayload::Gateway(ctx) => {
            // Hermes's `MessageEvent` (`.source.platform`, chat, user, `.text`).
            let wire = super::platform::event::wire(&ctx.event);
            let event_obj = py
                .import("gateway.platforms.event")?
                .getattr("_plughost_event")?
                .call1((to_py(&wire)?,))?;
            kw.set_item("event", event_obj)?;
            kw.set_item("gateway", &ctx.gateway)?;
            kw.set_item("session_store", py.None())?;
        }
        HookPayload::Loop(lc) if super::verify::is_pre_verify(event) => {
            super::verify::kwargs(&kw, lc, PLATFORM)?
        }
        // Hermes's own lanes ([`super::lanes`]): the keywords are the
        // point's parameters, as the firing place wrote them.
        HookPayload::Loop(lc) if matches!(event, HookEvent::Lane(_)) => {
            for (k, v) in &lc.params {
                kw.set_item(k, to_py(v)?)?;
            }
        }
        // Hermes names no loop point of the core.
        HookPayload::Loop(_) => {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a Hermes hook is never subscribed to a loop point",
            ))
        }
    }
    // Hermes gives platform events their own envelopes, without the
    // observers' schema version (`plugins_dispatch.invoke_hook`).
    if event != HookEvent::Lane(LaneId(&super::lanes::GATEWAY_PLATFORM_EVENT)) {
        kw.set_item(
            intern!(py, "telemetry_schema_version"),
            OBSERVER_SCHEMA_VERSION,
        )?;
    }
    Ok(kw)
}

/// [`kwargs`] of a tool event.
fn tool_kwargs(
    py: Python<'_>,
    kw: &Bound<'_, PyDict>,
    event: HookEvent,
    ctx: &mut crate::core::hooks::ToolCallContext,
    view: &ToolView,
) -> PyResult<()> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let args = view.shown.bind(py);
    kw.set_item("tool_name", tool_names::hermes_name(&ctx.tool_name))?;
    kw.set_item("task_id", opt(&ctx.task_id))?;
    kw.set_item("session_id", opt(&ctx.session_id))?;
    kw.set_item("tool_call_id", opt(&ctx.tool_call_id))?;
    match event {
        HookEvent::ResultRewrite => {
            kw.set_item("arguments", args)?;
            kw.set_item("result", ctx.result.as_deref())?;
        }
        HookEvent::ExecOutputRewrite => {
            kw.set_item("command", args.get_item("command")?)?;
            kw.set_item("output", ctx.result.as_deref())?;
            kw.set_item("exit_code", py.None())?;
            kw.set_item("cwd", py.None())?;
        }
        HookEvent::ToolDone => {
            kw.set_item("args", args)?;
            kw.set_item("result", ctx.result.as_deref())?;
            kw.set_item("duration_ms", ctx.duration_ms)?;
        }
        _ => {
            kw.set_item("args", args)?;
            kw.set_item("turn_id", py.None())?;
            kw.set_item("api_request_id", py.None())?;
            kw.set_item("middleware_trace", pyo3::types::PyList::empty(py))?;
        }
    }
    Ok(())
}

/// [`kwargs`] of a model-call event.
fn llm_kwargs<'py>(
    py: Python<'py>,
    kw: &Bound<'py, PyDict>,
    event: HookEvent,
    ctx: &crate::core::hooks::LlmCallContext,
) -> PyResult<()> {
    let to_py =
        |v: &serde_json::Value| -> PyResult<Bound<'py, PyAny>> { Ok(pythonize::pythonize(py, v)?) };
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    kw.set_item("session_id", opt(&ctx.session_id))?;
    kw.set_item("task_id", opt(&ctx.task_id))?;
    kw.set_item("model", &ctx.model)?;
    kw.set_item("platform", PLATFORM)?;
    kw.set_item("user_message", &ctx.user_message)?;
    let history = serde_json::Value::Array(ctx.messages.clone());
    kw.set_item("conversation_history", to_py(&history)?)?;
    match event {
        HookEvent::PromptContext => {
            let first = !ctx
                .messages
                .iter()
                .any(|m| m.get("role").and_then(|r| r.as_str()) == Some("assistant"));
            kw.set_item("is_first_turn", first)?;
        }
        HookEvent::ExchangeDone => {
            kw.set_item("assistant_response", &ctx.assistant_message)?;
        }
        HookEvent::ReplyRewrite => {
            kw.set_item("response_text", &ctx.assistant_message)?;
        }
        HookEvent::RequestFailed => {
            let error = ctx.response.get("error").and_then(|e| e.as_str());
            kw.set_item("error", error)?;
        }
        HookEvent::ResponseArrived => {
            kw.set_item("response", to_py(&ctx.response)?)?;
            let usage = serde_json::Value::Object(ctx.usage.clone());
            kw.set_item("usage", to_py(&usage)?)?;
        }
        _ => {}
    }
    Ok(())
}

impl HermesHook {
    /// Keep only the keywords the callback declares (unless it takes `**kwargs`).
    fn narrowed<'py>(
        &self,
        py: Python<'py>,
        all: Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let Some(accepted) = &self.accepted else {
            return Ok(all);
        };
        let accepted = accepted.bind(py);
        let kept = PyDict::new(py);
        for (k, v) in all.iter() {
            if accepted.contains(&k)? {
                kept.set_item(k, v)?;
            }
        }
        Ok(kept)
    }
}

fn text_of(v: &Bound<'_, PyAny>) -> String {
    v.str().map(|s| s.to_string()).unwrap_or_default()
}

/// A dict answer's `action`, lower-cased.
fn action_of(d: &Bound<'_, PyDict>) -> Option<String> {
    d.get_item("action")
        .ok()
        .flatten()
        .and_then(|a| a.extract::<String>().ok())
        .map(|a| a.trim().to_ascii_lowercase())
}

/// Read an answer the Hermes way. `args` is the call's shared arguments
/// dict (for `modify`), when the event is a tool event.
fn interpret(
    py: Python<'_>,
    event: HookEvent,
    ret: &Bound<'_, PyAny>,
    args: Option<&Bound<'_, PyDict>>,
) -> Result<HookAction, HookError> {
    if ret.is_none() {
        return Ok(HookAction::Continue);
    }
    let dict = ret.cast::<PyDict>().ok();
    let string = ret.cast::<PyString>().ok().map(|s| s.to_string());
    let wrong = || {
        Err(HookError::WrongShape(
            format!("a {}", text_of(&ret.get_type().into_any())),
            super::lanes::name_of(event).to_string(),
        ))
    };
    match event {
        HookEvent::ToolGuard => {
            let Some(d) = dict else {
                return Ok(HookAction::Continue); // Hermes ignores it
            };
            let message = d
                .get_item("message")
                .ok()
                .flatten()
                .map(|m| text_of(&m))
                .filter(|m| !m.trim().is_empty());
            match action_of(d).as_deref() {
                // plughost has no human approval gate: a call that needs
                // approval is refused, with the hook's reason.
                Some("block") | Some("approve") => {
                    Ok(message.map_or(HookAction::Continue, HookAction::Block))
                }
                Some("modify") => {
                    if let (Some(new), Some(args)) = (d.get_item("args").ok().flatten(), args) {
                        match new.cast::<PyDict>() {
                            Ok(new) => args
                                .update(new.as_mapping())
                                .map_err(|e| HookError::Raised(plugin_error(py, &e)))?,
                            Err(_) => tracing::warn!(
                                "a pre_tool_call hook answered modify with args that are not a dict; ignored"
                            ),
                        }
                    }
                    Ok(HookAction::Continue)
                }
                _ => Ok(HookAction::Continue),
            }
        }
        HookEvent::PromptContext => match (string, dict) {
            (Some(s), _) => Ok(HookAction::Inject(s)),
            (None, Some(d)) => match d.get_item("context").ok().flatten() {
                Some(c) if !c.is_none() => Ok(HookAction::Inject(text_of(&c))),
                _ => Ok(HookAction::Continue),
            },
            _ => wrong(),
        },
        HookEvent::ResultRewrite | HookEvent::ExecOutputRewrite | HookEvent::ReplyRewrite => {
            match string {
                Some(s) => Ok(HookAction::Replace(s)),
                None => wrong(),
            }
        }
        HookEvent::InboundGate => {
            let Some(d) = dict else {
                return wrong();
            };
            let field = |k: &str| {
                d.get_item(k)
                    .ok()
                    .flatten()
                    .map(|v| text_of(&v))
                    .unwrap_or_default()
            };
            match action_of(d).as_deref() {
                Some("skip") => Ok(HookAction::Skip(field("reason"))),
                Some("rewrite") => Ok(HookAction::Rewrite(field("text"))),
                _ => Ok(HookAction::Continue),
            }
        }
        HookEvent::Lane(_) if super::verify::is_pre_verify(event) => Ok(super::verify::answer(ret)),
        // Hermes v1 ignores `pre_command`'s answer; a directive is logged
        // so a plugin expecting a block or rewrite can be found.
        HookEvent::Lane(_) if dict.is_some() => {
            tracing::debug!(
                "a {} hook answered {}; its answer is ignored (as in Hermes v1)",
                super::lanes::name_of(event),
                text_of(ret)
            );
            Ok(HookAction::Continue)
        }
        // Hermes ignores every other answer.
        _ => Ok(HookAction::Continue),
    }
}

/// [`interpret`] the answer, then carry a `pre_tool_call`'s edits of a
/// Hermes-shaped view back into the call (a block needs none).
fn answered(
    py: Python<'_>,
    event: HookEvent,
    ret: &Bound<'_, PyAny>,
    view: Option<&ToolView>,
) -> Result<HookAction, HookError> {
    let action = interpret(py, event, ret, view.map(|v| v.shown.bind(py)))?;
    if let (HookEvent::ToolGuard, Some(view), false) =
        (event, view, matches!(action, HookAction::Block(_)))
    {
        view.write_back(py)?;
    }
    Ok(action)
}

fn raised(py: Python<'_>, e: &PyErr) -> HookError {
    HookError::Raised(plugin_error(py, e))
}

impl HookCallback for HermesHook {
    fn call(&self, event: HookEvent, mut payload: HookPayload<'_>) -> HookReturn {
        if let HookPayload::Loop(lc) = &payload {
            if super::verify::is_pre_verify(event) && !super::verify::fires(lc) {
                return HookReturn::Ready(Ok(HookAction::Continue));
            }
        }
        let called = try_attach(|py| {
            let view = match &mut payload {
                HookPayload::Tool(ctx) => match ToolView::new(py, ctx) {
                    Ok(v) => Some(v),
                    Err(e) => return HookReturn::Ready(Err(raised(py, &e))),
                },
                _ => None,
            };
            let called = kwargs(py, event, payload, view.as_ref())
                .and_then(|all| self.narrowed(py, all))
                .and_then(|kw| self.callback.bind(py).call((), Some(&kw)));
            match called {
                Err(e) => HookReturn::Ready(Err(raised(py, &e))),
                Ok(ret) => match bridge::resolve(py, ret) {
                    Awaited::Ready(Ok(v)) => {
                        HookReturn::Ready(answered(py, event, v.bind(py), view.as_ref()))
                    }
                    Awaited::Ready(Err(e)) => HookReturn::Ready(Err(raised(py, &e))),
                    Awaited::Pending(task) => HookReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        try_attach(|py| match r {
                            Ok(v) => answered(py, event, v.bind(py), view.as_ref()),
                            Err(e) => Err(raised(py, &e)),
                        })
                        .unwrap_or_else(|e| Err(HookError::NotRun(e.to_string())))
                    })),
                },
            }
        });
        called.unwrap_or_else(|e| HookReturn::Ready(Err(HookError::NotRun(e.to_string()))))
    }

    /// Its row's: Hermes's `pre_tool_call` fails closed, with its own messages.
    fn row(&self) -> Option<&'static EventRow> {
        self.row
    }
}
