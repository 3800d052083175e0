//! The payload each Codumentor event's handlers see, built from the loop
//! point's context with the seed's names (spec §1.2), and the edit of the
//! context a handler's payload asks for.

use serde_json::{json, Map, Value};

use crate::core::hooks::{EndedBy, LoopContext, LoopEdit};

fn flat_tools(tools: &[Value]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                let f = t.get("function").unwrap_or(t);
                json!({
                    "name": f.get("name").cloned().unwrap_or(Value::Null),
                    "description": f.get("description").cloned().unwrap_or(json!("")),
                    "parameters": f.get("parameters").cloned().unwrap_or(json!({"type": "object"})),
                })
            })
            .collect(),
    )
}

pub(super) fn openai_tools(flat: &Value) -> Option<Vec<Value>> {
    let items = flat.as_array()?;
    Some(
        items
            .iter()
            .filter_map(|t| {
                let t = t.as_object()?;
                if t.get("type").and_then(Value::as_str) == Some("function") {
                    return Some(Value::Object(t.clone()));
                }
                let name = t.get("name")?.as_str()?;
                Some(json!({"type": "function", "function": {
                    "name": name,
                    "description": t.get("description").cloned().unwrap_or(json!("")),
                    "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"})),
                }}))
            })
            .collect(),
    )
}

/// `[{id, name, args}]` of an assistant message's tool calls.
fn reply_tool_calls(reply: &Value) -> Value {
    Value::Array(
        reply
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| {
                        let f = &c["function"];
                        let args = match &f["arguments"] {
                            Value::String(s) => serde_json::from_str(s).unwrap_or(json!({})),
                            other => other.clone(),
                        };
                        json!({"id": c["id"], "name": f["name"], "args": args})
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

fn content_chunks(reply: &Value) -> Value {
    match reply.get("content").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => json!([s]),
        _ => json!([]),
    }
}

fn without_system(messages: &[Value]) -> Value {
    Value::Array(
        messages
            .iter()
            .skip_while(|m| m["role"] == "system")
            .cloned()
            .collect(),
    )
}

/// The seed's payload of `event` from the point's context; `None` when the
/// event does not fire here (a `TurnEnded` of another kind).
pub(super) fn payload_of(event: &str, lc: &LoopContext) -> Option<Map<String, Value>> {
    let p = match event {
        "onServerReady" | "onTurnInterrupted"
            if event == "onServerReady" || lc.ended_by == EndedBy::Interrupted =>
        {
            json!({})
        }
        "onInputReceived" => json!({"raw": lc.text}),
        // The run descriptor the scheduler put in `params`.
        "onScheduledRunGate" | "onScheduledRunAutoDisabled" => {
            let field = |k: &str| lc.params.get(k).cloned().unwrap_or(Value::Null);
            json!({
                "name": field("name"),
                "plugin": field("plugin"),
                "every_seconds": field("every_seconds"),
                "runs": field("runs"),
                "failures": field("failures"),
                "consecutive_failures": field("consecutive_failures"),
            })
        }
        // What the reload put in `params`.
        "onConfigReload" => json!({
            "sections": lc.params.get("sections").cloned().unwrap_or_else(|| json!([])),
            "config": lc.params.get("config").cloned().unwrap_or_else(|| json!({})),
        }),
        "onContextReady" => {
            json!({"session_id": lc.session_id, "user_id": "user", "messages": without_system(&lc.messages)})
        }
        "onAfterInput" => json!({"messages": without_system(&lc.messages)}),
        "onPromptAssemble" | "onAfterPromptAssemble" => {
            json!({"messages": lc.messages, "tools": flat_tools(&lc.tools)})
        }
        "onLLMCallStart" => {
            json!({"model": lc.model, "messages": lc.messages, "tools": flat_tools(&lc.tools), "params": lc.params})
        }
        "onLLMError" => {
            json!({"model": lc.model, "messages": lc.messages, "tools": flat_tools(&lc.tools), "params": lc.params, "error": lc.error})
        }
        "onLLMCallEnd" => {
            json!({"content_chunks": content_chunks(&lc.reply), "tool_calls": reply_tool_calls(&lc.reply)})
        }
        "onUsageTracked" if !lc.usage.is_empty() => {
            json!({"iteration_usage": lc.usage, "session_totals": session_totals(lc)})
        }
        "onAfterLLM" => {
            json!({"content_chunks": content_chunks(&lc.reply), "tool_calls": reply_tool_calls(&lc.reply), "messages": lc.messages})
        }
        "onToolInvokeStart" => {
            json!({"tool": lc.tool_call.name, "args": lc.tool_call.arguments, "session_id": lc.session_id})
        }
        "onToolExecuting" => json!({"tool": lc.tool_call.name, "tool_call_id": lc.tool_call.id}),
        "onToolInvokeEnd" => {
            json!({"tool": lc.tool_call.name, "args": lc.tool_call.arguments, "result": lc.result, "ms": lc.duration_ms})
        }
        "onAfterTool" => {
            json!({"tool": lc.tool_call.name, "args": lc.tool_call.arguments, "result": lc.result, "ms": lc.duration_ms, "messages": lc.messages})
        }
        "onBeforeSendResponse" => json!({"assistant_text": lc.text, "tool_calls": []}),
        "onResponsePersist" => json!({"assistant_text": lc.text, "final_message": lc.reply}),
        "onTurnAborted" if lc.ended_by == EndedBy::Aborted => {
            json!({"reason": lc.reason, "assistant_text": lc.text})
        }
        "onError" if lc.ended_by == EndedBy::Error => {
            json!({"error": lc.error, "context": {"where": "agent_loop", "session_id": lc.session_id}})
        }
        _ => return None,
    };
    match p {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

// The per-session totals moved where the session store reaches them.
use super::session_state::Totals;

/// The session's totals with this call's usage (`lc.usage`) counted in;
/// outside a session (a tool called on its own) this call's usage.
fn session_totals(lc: &LoopContext) -> Map<String, Value> {
    let Some(turn) = &lc.turn else {
        return lc.usage.clone();
    };
    let Some(totals) = turn.session_slot(super::DIALECT.as_str(), Totals::new) else {
        return lc.usage.clone();
    };
    let mut totals = totals.0.lock().unwrap_or_else(|e| e.into_inner());
    let (sum, last) = &mut *totals;
    if !last.is(turn, lc.iteration) {
        *last = super::session_state::Counted::of(turn, lc.iteration);
        add_usage(sum, &lc.usage);
    }
    sum.clone()
}

/// Add `usage`'s numbers into `sum` (nested objects too; other values are
/// the latest seen).
fn add_usage(sum: &mut Map<String, Value>, usage: &Map<String, Value>) {
    for (key, value) in usage {
        match (sum.get_mut(key), value) {
            (Some(Value::Number(a)), Value::Number(b)) => {
                *a = match (a.as_i64(), b.as_i64()) {
                    (Some(x), Some(y)) => x.saturating_add(y).into(),
                    _ => serde_json::Number::from_f64(
                        a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0),
                    )
                    .unwrap_or_else(|| a.clone()),
                }
            }
            (Some(Value::Object(a)), Value::Object(b)) => add_usage(a, b),
            _ => {
                sum.insert(key.clone(), value.clone());
            }
        }
    }
}

/// What the chain's payload feeds back into the point's context.
pub(super) fn edit_of(event: &str, payload: &Map<String, Value>) -> Option<LoopEdit> {
    let text = |k: &str| payload.get(k).and_then(Value::as_str).map(str::to_string);
    match event {
        "onInputReceived" => text("raw").map(LoopEdit::Text),
        "onPromptAssemble" => {
            let mut edits = Vec::new();
            if let Some(m) = payload.get("messages").and_then(Value::as_array) {
                edits.push(LoopEdit::Messages(m.clone()));
            }
            if let Some(t) = payload.get("tools").and_then(openai_tools) {
                edits.push(LoopEdit::Tools(t));
            }
            Some(LoopEdit::All(edits))
        }
        // "A patch of args changes the arguments the handler receives".
        "onToolInvokeStart" => payload.get("args").cloned().map(LoopEdit::Arguments),
        "onToolInvokeEnd" => text("result").map(LoopEdit::Result),
        "onBeforeSendResponse" => text("assistant_text").map(LoopEdit::Text),
        // {"skip": True, "skip_reason": "…"} patched into the descriptor.
        "onScheduledRunGate" => Some(LoopEdit::Params(payload.clone())),
        _ => None,
    }
}
