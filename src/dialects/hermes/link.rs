//! What a Hermes plugin reaches at run time through its `PluginContext`:
//! the host's tools (`ctx.dispatch_tool`), the agent's model (`ctx.llm`)
//! and the conversation (`ctx.inject_message`).
//!
//! Hermes hands its context a reference to the running CLI and registry;
//! here the agent that runs the host binds itself ([`bind`]) when it is
//! created. Without an agent (`plughost tools call`, a bare host)
//! `dispatch_tool` and `llm` answer with an error saying so and
//! `inject_message` returns `False`, as Hermes's does without a CLI.
//!
//! Mapping decisions, where Hermes and plughost differ:
//! - `dispatch_tool` runs the host's whole pipeline (`pre_tool_call` guards
//!   included), so a plugin cannot call around a guard; failures come back
//!   as Hermes's error JSON.
//! - `inject_message` queues the message; the agent appends it to the
//!   conversation as a user message at its next model iteration (of the
//!   turn running now, else of the next turn). A running tool is not
//!   interrupted.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock, Weak};

use serde_json::{Map, Value};

use crate::agent::provider::{ChatRequest, Provider};
use crate::core::outcome::{Renderer, ToolOutcome};
use crate::host::Host;

use super::render::HermesRenderer;

struct Link {
    host: Weak<Host>,
    provider: Arc<dyn Provider>,
}

static LINK: RwLock<Option<Link>> = RwLock::new(None);
static INBOX: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Make `host`'s tools and `provider`'s model what Hermes plugins reach.
/// The latest agent wins; the host is held weakly (dropping it unbinds).
pub fn bind(host: &Arc<Host>, provider: Arc<dyn Provider>) {
    *LINK.write().unwrap_or_else(|e| e.into_inner()) = Some(Link {
        host: Arc::downgrade(host),
        provider,
    });
}

fn bound() -> Option<(Arc<Host>, Arc<dyn Provider>)> {
    let link = LINK.read().unwrap_or_else(|e| e.into_inner());
    let link = link.as_ref()?;
    Some((link.host.upgrade()?, Arc::clone(&link.provider)))
}

/// Whether an agent is running this process's Hermes plugins.
pub fn is_bound() -> bool {
    bound().is_some()
}

/// Messages plugins injected since the last call, oldest first.
pub fn take_injected() -> Vec<String> {
    INBOX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect()
}

/// `ctx.inject_message`: queue `content` (`role` other than `user` is
/// prefixed as Hermes does). `false` when no agent runs.
pub fn inject(content: &str, role: &str) -> bool {
    if !is_bound() {
        tracing::warn!(
            "inject_message: no agent in this process (plughost run/chat/serve runs one); message dropped"
        );
        return false;
    }
    let message = if role == "user" {
        content.to_string()
    } else {
        format!("[{role}] {content}")
    };
    INBOX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(message);
    true
}

fn error_json(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

/// Run `future` on plughost's tokio runtime and wait for it on this
/// (non-runtime) thread; the caller has released the GIL.
fn wait<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let runtime = crate::runtime::Runtime::get()
        .ok_or_else(|| "plughost's Python runtime is not running".to_string())?;
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.tokio().spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv()
        .map_err(|_| "the call was dropped before it finished".to_string())
}

/// `ctx.dispatch_tool`: call `tool` with `args` through the host's pipeline;
/// its result text, or Hermes's error JSON.
pub fn dispatch_tool(tool: &str, args: Value, task_id: &str) -> String {
    let Some((host, _)) = bound() else {
        return error_json(&format!(
            "dispatch_tool('{tool}'): no agent is running in this process, so no tools can be dispatched"
        ));
    };
    let (name, key) = (tool.to_string(), task_id.to_string());
    let done = wait(async move {
        crate::core::dispatch::call_tool(host.registry(), &name, args, &key, "").await
    });
    match done {
        Ok(result) if matches!(result.outcome, ToolOutcome::Ok) => result.text,
        Ok(result) => HermesRenderer.render(tool, &result.outcome),
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
    plugin: &str,
    messages: Vec<Value>,
    params: Map<String, Value>,
) -> Result<Completion, String> {
    let Some((_, provider)) = bound() else {
        return Err(format!(
            "ctx.llm: no agent is running in this process, so plugin '{plugin}' has no model to call"
        ));
    };
    let model = provider.model();
    let request = ChatRequest {
        model: model.clone(),
        system: String::new(),
        messages,
        tools: Vec::new(),
        // Its own conversation: never advances or reads an agent session.
        session_key: format!("plugin-llm:{plugin}"),
        params,
    };
    let response = wait(async move { provider.complete(request, None).await })?
        .map_err(|e| format!("model call failed: {e}"))?;
    Ok(Completion {
        text: response.text,
        model,
        usage: response.usage,
    })
}
