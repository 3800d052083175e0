//! The messages of a turn: the system prompt split off and joined back,
//! the provider's wire shape, the reply as the loop records it, and the
//! contexts of the model events.

use serde_json::{json, Value};

use crate::agent::provider::{ChatResponse, ToolCallRequest};
use crate::core::hooks::LlmCallContext;

/// The system prompt (a leading `system` message's content; empty when a
/// hook removed it) and the rest of a message list.
/// The system prompt's message, taken off the front of `messages` (moved,
/// not copied); `None` when they start with another.
pub(super) fn take_system(messages: &mut Vec<Value>) -> Option<Value> {
    match messages.first() {
        Some(first) if first["role"] == "system" => Some(messages.remove(0)),
        _ => None,
    }
}

pub(super) fn split_system(messages: &[Value]) -> (String, Vec<Value>) {
    match messages.first() {
        Some(first) if first["role"] == "system" => (
            first["content"].as_str().unwrap_or_default().to_string(),
            messages[1..].to_vec(),
        ),
        _ => (String::new(), messages.to_vec()),
    }
}

/// The system prompt of a message list (empty without one).
pub(super) fn system_of(messages: &[Value]) -> String {
    match messages.first() {
        Some(first) if first["role"] == "system" => {
            first["content"].as_str().unwrap_or_default().to_string()
        }
        _ => String::new(),
    }
}

/// The messages after the system prompt (all of them without one).
pub(super) fn after_system(messages: &[Value]) -> &[Value] {
    match messages.first() {
        Some(first) if first["role"] == "system" => &messages[1..],
        _ => messages,
    }
}

pub(super) fn join_system(system: &str, messages: Vec<Value>) -> Vec<Value> {
    let mut all = vec![json!({"role": "system", "content": system})];
    all.extend(messages);
    all
}

/// The OpenAI fields of a message.
const WIRE_FIELDS: [&str; 5] = ["role", "content", "tool_calls", "tool_call_id", "name"];

/// A message as the provider is sent it: OpenAI fields only (no `ts`,
/// `metadata` or other fields a hook or the transcript added).
pub(super) fn wire_message(message: &Value) -> Value {
    into_wire_message(message.clone())
}

/// [`wire_message`] of a message the caller gives away: its other fields
/// are dropped in place instead of the kept ones copied.
pub(super) fn into_wire_message(mut message: Value) -> Value {
    if let Some(map) = message.as_object_mut() {
        map.retain(|k, v| {
            WIRE_FIELDS.contains(&k.as_str()) && !(k.as_str() == "tool_calls" && v.is_null())
        });
    }
    message
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wire_message_keeps_the_openai_fields_in_their_order() {
        let message = json!({
            "ts": 1, "role": "assistant", "metadata": {"a": 1}, "content": "hi",
            "tool_calls": null, "name": "n", "tool_call_id": "c"
        });
        let borrowed = wire_message(&message);
        assert_eq!(
            message["ts"], 1,
            "the borrowed form leaves the message whole"
        );
        let owned = into_wire_message(message);
        assert_eq!(owned, borrowed);
        let keys: Vec<&String> = owned.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["role", "content", "name", "tool_call_id"]);
    }

    #[test]
    fn the_system_prompt_is_the_first_message_only() {
        let with = [
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "u"}),
        ];
        assert_eq!(system_of(&with), "s");
        assert_eq!(after_system(&with), &with[1..]);
        let without = [
            json!({"role": "user", "content": "u"}),
            json!({"role": "system", "content": "s"}),
        ];
        assert_eq!(system_of(&without), "");
        assert_eq!(after_system(&without), &without[..]);
        assert_eq!(
            split_system(&with),
            (system_of(&with), after_system(&with).to_vec())
        );
    }
}
