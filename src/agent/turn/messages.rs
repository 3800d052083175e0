//! The messages of a turn: the system prompt split off and joined back,
//! the provider's wire shape, the reply as the loop records it, and the
//! contexts of the model events.

use serde_json::{json, Value};

use crate::agent::provider::{ChatResponse, ToolCallRequest};
use crate::core::hooks::LlmCallContext;

/// The system prompt (a leading `system` message's content; empty when a
/// hook removed it) and the rest of a message list.
pub(super) fn split_system(messages: &[Value]) -> (String, Vec<Value>) {
    match messages.first() {
        Some(first) if first["role"] == "system" => (
            first["content"].as_str().unwrap_or_default().to_string(),
            messages[1..].to_vec(),
        ),
        _ => (String::new(), messages.to_vec()),
    }
}

pub(super) fn join_system(system: &str, messages: Vec<Value>) -> Vec<Value> {
    let mut all = vec![json!({"role": "system", "content": system})];
    all.extend(messages);
    all
}

/// A message as the provider is sent it: OpenAI fields only (no `ts`,
/// `metadata` or other fields a hook or the transcript added).
pub(super) fn wire_message(message: &Value) -> Value {
    const FIELDS: [&str; 5] = ["role", "content", "tool_calls", "tool_call_id", "name"];
    match message.as_object() {
        Some(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| {
                    FIELDS.contains(&k.as_str()) && !(k.as_str() == "tool_calls" && v.is_null())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        None => message.clone(),
    }
}

/// P8's `stop_reason`: the provider's finish reason.
pub(super) fn stop_reason(response: &ChatResponse) -> &'static str {
    if response.truncated {
        "length"
    } else if response.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

/// The provider's response as a P8 replacement of the reply left it.
pub(super) fn reply_as_response(reply: &Value, mut response: ChatResponse) -> ChatResponse {
    response.text = reply["content"].as_str().unwrap_or_default().to_string();
    response.tool_calls = reply["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCallRequest {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    response
}

pub(super) fn llm_base(c: &LlmCallContext) -> LlmCallContext {
    LlmCallContext {
        session_id: c.session_id.clone(),
        task_id: c.task_id.clone(),
        model: c.model.clone(),
        messages: c.messages.clone(),
        tools: c.tools.clone(),
        system: c.system.clone(),
        user_message: c.user_message.clone(),
        ..Default::default()
    }
}

/// The context of the events after a model reply.
pub(super) fn answered(base: &LlmCallContext, response: &ChatResponse) -> LlmCallContext {
    LlmCallContext {
        response: serde_json::to_value(response).unwrap_or_default(),
        assistant_message: response.text.clone(),
        usage: response.usage.clone(),
        truncated: response.truncated,
        ..llm_base(base)
    }
}

/// The assistant message of `response`, tool calls included.
pub(super) fn assistant_message(response: &ChatResponse) -> Value {
    let mut assistant = json!({"role": "assistant", "content": response.text});
    if !response.tool_calls.is_empty() {
        assistant["tool_calls"] = response
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    assistant
}
