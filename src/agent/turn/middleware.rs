//! The model call's middleware lanes ([`crate::core::pipeline::middleware`]):
//! `llm_request` edits the request after P7, `llm_execution` runs around
//! the provider call. Without subscriptions both cost one lookup.

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::agent::provider::{ChatRequest, ChatResponse, Provider, StreamEvent};
use crate::core::fire::fire_entries;
use crate::core::hooks::{HookEvent, HookPayload, LaneId, LoopContext, Point};
use crate::core::pipeline::middleware::{self, ExecCall, ExecError};
use crate::core::registry::Registry;

/// How a model call through `llm_execution` middleware failed.
pub(super) enum Failed {
    /// The provider (or a middleware after `next`) failed.
    Call(String),
    /// A middleware blocked the call (`LLMExecutionBlocked`).
    Blocked(String),
}

/// The request as Hermes's middleware sees it: the provider's keyword
/// arguments (`model`, `messages` with the system prompt first, `tools`,
/// and the call's parameters).
fn as_kwargs(request: &ChatRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    messages.extend(request.messages.iter().cloned());
    let mut map = request.params.clone();
    map.insert("model".into(), json!(request.model));
    map.insert("messages".into(), Value::Array(messages));
    map.insert("tools".into(), Value::Array(request.tools.to_vec()));
    Value::Object(map)
}

/// A request rebuilt from `kwargs` (what a middleware passed on).
fn from_kwargs(mut base: ChatRequest, kwargs: Value) -> ChatRequest {
    let Value::Object(mut map) = kwargs else {
        return base;
    };
    if let Some(Value::String(model)) = map.remove("model") {
        base.model = model;
    }
    if let Some(Value::Array(tools)) = map.remove("tools") {
        base.tools = Arc::new(tools);
    }
    if let Some(Value::Array(messages)) = map.remove("messages") {
        let (system, rest): (Vec<Value>, Vec<Value>) =
            messages.into_iter().partition(|m| m["role"] == "system");
        base.system = system
            .iter()
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        base.messages = std::sync::Arc::new(rest);
    }
    base.params = map;
    base
}

/// `llm_request`: the request as its chain left it.
pub(super) async fn request(
    registry: &Registry,
    request: &mut ChatRequest,
    context: impl FnOnce() -> LoopContext,
) {
    let Some((row, entries)) = middleware::request_lane(registry.hooks(), Point::ModelCallBefore)
    else {
        return;
    };
    let event = HookEvent::Lane(LaneId(row));
    let mut lc = context();
    lc.model = request.model.clone();
    lc.params = match as_kwargs(request) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let before = lc.params.clone();
    fire_entries(
        entries,
        event,
        HookPayload::Loop(&mut lc),
        registry.hook_timeout,
    )
    .await;
    if lc.params != before {
        *request = from_kwargs(request.clone(), Value::Object(lc.params));
    }
}

/// The provider call inside the `llm_execution` chain, run on a blocking
/// thread (the middleware is synchronous; `next` waits for the provider).
/// Without subscriptions: the provider call itself, streamed.
pub(super) async fn complete(
    registry: &Registry,
    provider: &Arc<dyn Provider>,
    request: ChatRequest,
    stream: Option<UnboundedSender<StreamEvent>>,
) -> Result<ChatResponse, Failed> {
    let Some((row, entries)) = middleware::around_lane(registry.hooks(), Point::ModelCallBefore)
    else {
        return provider
            .complete(request, stream)
            .await
            .map_err(|e| Failed::Call(e.to_string()));
    };
    let entries = entries.to_vec();
    let provider = Arc::clone(provider);
    let handle = tokio::runtime::Handle::current();
    let answer: Arc<Mutex<Option<ChatResponse>>> = Arc::default();
    let kept = Arc::clone(&answer);
    let call = ExecCall {
        kind: row.name,
        session_id: request.session_key.clone(),
        tool: String::new(),
        original: as_kwargs(&request),
    };
    let ran = tokio::task::spawn_blocking(move || {
        let payload = call.original.clone();
        let mut terminal = |kwargs: Value| {
            let sent = from_kwargs(request.clone(), kwargs);
            match handle.block_on(provider.complete(sent, stream.clone())) {
                Ok(response) => {
                    let summary = json!({"content": response.text, "usage": response.usage});
                    *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(response);
                    Ok(summary)
                }
                Err(e) => Err(ExecError::Downstream(e.to_string())),
            }
        };
        middleware::run_chain(&entries, &call, payload, &mut terminal)
    })
    .await
    .map_err(|e| Failed::Call(format!("llm_execution middleware panicked: {e}")))?;
    match ran {
        Ok(_) => answer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                Failed::Call(
                    "llm_execution middleware returned without calling next_call (plughost needs the provider's reply)".into(),
                )
            }),
        Err(ExecError::Blocked { reason, metadata }) => {
            let by = metadata
                .get("checked_by")
                .and_then(Value::as_str)
                .unwrap_or("middleware");
            Err(Failed::Blocked(format!("LLM call blocked by {by}: {reason}")))
        }
        Err(ExecError::Failed(e) | ExecError::Downstream(e)) => Err(Failed::Call(e)),
    }
}
