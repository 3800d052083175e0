//! What a Hermes plugin reaches at run time through its `PluginContext`:
//! the host's tools (`ctx.dispatch_tool`), the agent's model (`ctx.llm`)
//! and the conversation (`ctx.inject_message`).
//!
//! Hermes hands its context a reference to the running CLI and registry;
//! here the agent that runs the host gives the host an
//! [`crate::core::agent_link::AgentLink`] when it is created,
//! and the context reaches it through the host's state (each context holds
//! its host's [`Extensions`]). Without an agent (`plughost tools call`, a
//! bare host) `dispatch_tool` and `llm` answer with an error saying so and
//! `inject_message` returns `False`, as Hermes's does without a CLI.
//!
//! Mapping decisions, where Hermes and plughost differ:
//! - `dispatch_tool` runs the host's whole pipeline (`pre_tool_call` guards
//!   included), so a plugin cannot call around a guard; failures come back
//!   as Hermes's error JSON.
//! - `inject_message` queues the message for the session whose tool call
//!   made it (the calling turn is carried into the handler in a Python
//!   context variable, so an `async def` handler keeps it); the agent
//!   appends it to that session's conversation as a user message at its
//!   next model iteration (of the turn running now, else of the session's
//!   next turn). A running tool is not interrupted. Under `serve`, each
//!   session gets only its own injections.
//! - Inside a `delegate` sub-agent the calling session is the sub-agent's:
//!   the message joins the sub-agent's in-flight list (and its
//!   transcript). Hermes puts every injection into its one CLI's queue,
//!   which is the conversation the injecting tool belongs to when there is
//!   one conversation; plughost keeps that rule ("the conversation whose
//!   turn ran the tool") for every session, sub-agents included, so a
//!   sub-agent's plugin never writes into a parent's transcript behind
//!   the delegate tool's result.
//! - A call outside any tool call (a background thread, a command) has no
//!   conversation to join: as Hermes's gateway without a `session_key`, it
//!   is dropped with a warning and returns `False`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use serde_json::{Map, Value};

use crate::core::agent_link::{AgentLink, AgentSlot, Injected, LinkRequest};
use crate::core::extensions::Extensions;
use crate::core::outcome::{Renderer, ToolOutcome};

use super::render::HermesRenderer;

/// The context variable holding the tool call running now: its host and
/// session. Per interpreter, not per host: it is a Python object of the
/// one interpreter of the process, and its value is set and reset around
/// each call, so hosts never see each other's values.
static CALLING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The value of the calling-turn variable.
#[pyclass(frozen, module = "_plughost_hermes", name = "CallingTurn")]
struct CallingTurn {
    host: Arc<Extensions>,
    session: String,
}

fn calling_var(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    CALLING
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("contextvars")?
                    .getattr("ContextVar")?
                    .call1(("plughost_hermes_calling_turn",))?
                    .unbind(),
            )
        })
        .map(|v| v.bind(py))
}

/// Run `call` as a tool call of `session` on `host`: what `inject_message`
/// joins and where `registry.dispatch` dispatches, for the handler and the
/// coroutines it starts.
pub fn with_calling_turn<T>(
    py: Python<'_>,
    host: &Arc<Extensions>,
    session: &str,
    call: impl FnOnce() -> T,
) -> T {
    let value = CallingTurn {
        host: Arc::clone(host),
        session: session.to_string(),
    };
    let token = calling_var(py).and_then(|var| {
        let token = var.call_method1("set", (Py::new(py, value)?,))?;
        Ok((var.clone(), token))
    });
    let out = call();
    if let Ok((var, token)) = token {
        let _ = var.call_method1("reset", (token,));
    }
    out
}

/// The host and session of the tool call running now, if any.
pub fn calling_turn(py: Python<'_>) -> Option<(Arc<Extensions>, String)> {
    let value = calling_var(py)
        .ok()?
        .call_method1("get", (py.None(),))
        .ok()?;
    let turn = value.cast::<CallingTurn>().ok()?.get();
    Some((Arc::clone(&turn.host), turn.session.clone()))
}

fn bound(host: &Extensions) -> Option<Arc<dyn AgentLink>> {
    host.peek::<AgentSlot>().and_then(|slot| slot.get())
}

/// `ctx.inject_message`: queue `content` for the calling session (`role`
/// other than `user` is prefixed as Hermes does). `false` when no agent
/// runs the host or no turn is calling; outside a turn, the messaging
/// gateway's injector takes it into the chat that spoke last.
pub fn inject(py: Python<'_>, host: &Extensions, content: &str, role: &str) -> bool {
    inject_to(py, host, content, role, None)
}

/// [`inject`], into the session `session_key` names (Hermes's
/// `session_key=`): the calling turn's own joins it; another one is a new
/// message in that gateway chat (its turn runs, its reply goes to the chat).
pub fn inject_to(
    py: Python<'_>,
    host: &Extensions,
    content: &str,
    role: &str,
    session_key: Option<&str>,
) -> bool {
    // In a worker (issue 47): the host decides, for the calling session.
    let bridge = crate::dialects::host_calls::bridge(host);
    if bridge.is_none() && bound(host).is_none() {
        tracing::warn!(
            "inject_message: no agent in this process (plughost run/chat/serve runs one); message dropped"
        );
        return false;
    }
    let session = calling_turn(py)
        .filter(|(calling, _)| std::ptr::eq(Arc::as_ptr(calling), host))
        .map(|(_, session)| session)
        .filter(|session| !session.is_empty());
    if let Some(bridge) = bridge {
        let call = crate::dialects::host_calls::HostCall::Inject {
            session: session.unwrap_or_default(),
            content: content.to_string(),
            role: role.to_string(),
            session_key: session_key.map(str::to_string),
        };
        return match py.detach(|| bridge.call(call)) {
            Ok(answer) => answer.as_bool().unwrap_or(false),
            Err(e) => {
                tracing::warn!("inject_message: the host did not take the message: {e}");
                false
            }
        };
    }
    deliver(host, session.as_deref(), session_key, content, role)
}

/// `inject_message` from an isolated plugin (issue 47): what
/// [`inject_to`] does once it knows the calling session (empty: none).
pub fn inject_for_session(
    host: &Extensions,
    session: &str,
    content: &str,
    role: &str,
    session_key: Option<&str>,
) -> bool {
    if bound(host).is_none() {
        tracing::warn!(
            "inject_message: no agent in this process (plughost run/chat/serve runs one); message dropped"
        );
        return false;
    }
    let session = Some(session).filter(|s| !s.is_empty());
    deliver(host, session, session_key, content, role)
}

/// Queue the message for the calling `session` (`role` other than `user`
/// prefixed), or hand it to the gateway's injector when there is no
/// calling session or `session_key` names another chat.
fn deliver(
    host: &Extensions,
    session: Option<&str>,
    session_key: Option<&str>,
    content: &str,
    role: &str,
) -> bool {
    let message = if role == "user" {
        content.to_string()
    } else {
        format!("[{role}] {content}")
    };
    let session = session.filter(|s| session_key.is_none_or(|k| k == *s));
    let Some(session) = session else {
        let injector = host
            .peek::<crate::dialects::platforms::PlatformTable>()
            .and_then(|table| table.injector());
        if let Some(injector) = injector {
            if injector.inject(session_key, &message) {
                return true;
            }
        }
        tracing::warn!(
            "inject_message: called outside a tool call of a conversation, and no gateway chat to take it; message dropped"
        );
        return false;
    };
    host.get::<Injected>().push(session, message);
    true
}

fn error_json(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

/// Run `future` on the tokio runtime of the agent that runs `host` (the
/// one it was set from, [`crate::runtime::CallerRuntime`]) and wait for it
/// on this thread (a Python thread, or one of its workers while the others
/// run it; the caller has released the GIL). When the agent runs on a current-thread
/// runtime, or none was captured, plughost's own runtime runs it, started
/// on first use (the one case with a second tokio runtime in the process).
pub(super) fn wait<T: Send + 'static>(
    host: &Extensions,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let handle = host
        .get::<crate::runtime::CallerRuntime>()
        .handle()
        .ok_or_else(|| "plughost's Python runtime is not running".to_string())?;
    let (tx, rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv()
        .map_err(|_| "the call was dropped before it finished".to_string())
}

/// `ctx.dispatch_tool`: call `tool` with `args` through the host's pipeline;
/// its result text, or Hermes's error JSON. A Hermes name of a built-in
/// (`terminal`, `patch`, `delegate_task`, `search_files` for files) no
/// registered tool has runs plughost's built-in, its arguments translated
/// ([`super::tool_names`]).
pub fn dispatch_tool(host: &Extensions, tool: &str, args: Value, task_id: &str) -> String {
    if let Some(bridge) = crate::dialects::host_calls::bridge(host) {
        let call = crate::dialects::host_calls::HostCall::DispatchTool {
            tool: tool.to_string(),
            args,
            task_id: task_id.to_string(),
        };
        return match bridge.call(call) {
            Ok(Value::String(text)) => text,
            Ok(other) => other.to_string(),
            Err(e) => error_json(&format!("Tool execution failed: {e}")),
        };
    }
    let no_agent = || {
        error_json(&format!(
            "dispatch_tool('{tool}'): no agent is running in this process, so no tools can be dispatched"
        ))
    };
    let Some(link) = bound(host) else {
        return no_agent();
    };
    let run = |name: &str, args: Value| {
        wait(
            host,
            link.dispatch_tool(name.to_string(), args, task_id.to_string()),
        )
    };
    let mut ran = run(tool, args.clone());
    if let (Ok(Some(result)), Value::Object(map)) = (&ran, &args) {
        if matches!(result.outcome, ToolOutcome::NotFound) {
            match super::tool_names::from_hermes_call(tool, map) {
                Some(Ok((builtin, translated))) => {
                    ran = run(builtin, Value::Object(translated));
                }
                Some(Err(no)) => {
                    return error_json(&format!(
                        "{tool} with {} = {} has no counterpart among plughost's built-in tools",
                        no.key, no.value
                    ))
                }
                None => {}
            }
        }
    }
    match ran {
        Ok(None) => no_agent(),
        Ok(Some(result)) if matches!(result.outcome, ToolOutcome::Ok) => result.text,
        Ok(Some(result)) => HermesRenderer.render(tool, &result.outcome),
        Err(e) => error_json(&format!("Tool execution failed: {e}")),
    }
}

/// What `ctx.llm.complete` gets back: text, model, usage.
pub struct Completion {
    pub text: String,
    pub model: String,
    pub usage: Map<String, Value>,
}

/// `ctx.llm.complete` (and `complete_structured`): `messages` to the
/// agent's model with `params` merged into the request, no tools offered.
pub fn complete(
    host: &Extensions,
    plugin: &str,
    messages: Vec<Value>,
    params: Map<String, Value>,
) -> Result<Completion, String> {
    if let Some(bridge) = crate::dialects::host_calls::bridge(host) {
        let answer =
            bridge.call(crate::dialects::host_calls::HostCall::Complete { messages, params })?;
        let text = |k: &str| {
            answer
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        return Ok(Completion {
            text: text("text"),
            model: text("model"),
            usage: answer
                .get("usage")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        });
    }
    let Some(link) = bound(host) else {
        return Err(format!(
            "ctx.llm: no agent is running in this process, so plugin '{plugin}' has no model to call"
        ));
    };
    let request = LinkRequest {
        messages,
        params,
        // Its own conversation: never advances or reads an agent session.
        session_key: format!("plugin-llm:{plugin}"),
    };
    let response =
        wait(host, link.complete(request))?.map_err(|e| format!("model call failed: {e}"))?;
    Ok(Completion {
        text: response.text,
        model: response.model,
        usage: response.usage,
    })
}
