//! The scripted provider: replays assistant turns from a YAML or JSON file.
//!
//! The embedded default (`scripted:demo`), so `plughost chat` and `run` work
//! on a fresh machine with no account. Format:
//!
//! ```yaml
//! turns:                       # replayed in order, per session
//!   - say: "Let me look."      # assistant text (optional)
//!     tool_calls:              # optional
//!       - name: list_dir
//!         args: {path: "."}
//!     usage: {prompt_tokens: 11, completion_tokens: 7}   # optional: the usage it reports
//!   - say: "Done: {tool_results}"   # placeholders: {tool_results}, {user_message}, {home}, {message_count}
//! after_end: "(the script has no more turns)"   # optional reply once turns run out
//! ```
//!
//! Each session key keeps its own position, so concurrent sessions replay
//! independently; `/new` starts the session's script from the top.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::{ChatRequest, ChatResponse, Provider, ProviderError, StreamEvent, ToolCallRequest};
use crate::core::hooks::BoxFuture;

const DEMO: &str = include_str!("../../../examples/demo.yaml");

#[derive(Clone, Debug, Deserialize)]
pub struct Script {
    pub turns: Vec<ScriptTurn>,
    #[serde(default)]
    pub after_end: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ScriptTurn {
    #[serde(default)]
    pub say: String,
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
    /// The usage the turn reports, as a provider's `usage` object
    /// (`{prompt_tokens: 11, completion_tokens: 7}`); none when left out.
    #[serde(default)]
    pub usage: serde_json::Map<String, Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ScriptCall {
    pub name: String,
    #[serde(default)]
    pub args: Value,
}

impl Script {
    /// The demo script shipped in the binary.
    pub fn demo() -> Script {
        Script::parse(DEMO, "demo.yaml").expect("the shipped demo script parses")
    }

    pub fn load(path: &Path) -> Result<Script, ProviderError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::Script(format!("cannot read script {}: {e}", path.display()))
        })?;
        Script::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, name: &str) -> Result<Script, ProviderError> {
        let parsed: Result<Script, String> = if name.ends_with(".json") {
            serde_json::from_str(text).map_err(|e| e.to_string())
        } else {
            serde_saphyr::from_str(text).map_err(|e| e.to_string())
        };
        let script = parsed
            .map_err(|e| ProviderError::Script(format!("script {name} is malformed: {e}")))?;
        if script.turns.is_empty() {
            return Err(ProviderError::Script(format!("script {name} has no turns")));
        }
        Ok(script)
    }
}

/// Replays a [`Script`].
pub struct Scripted {
    script: Script,
    positions: Mutex<HashMap<String, usize>>,
    /// What `{home}` stands for (left as is when unknown).
    pub home: Option<std::path::PathBuf>,
}

impl Scripted {
    pub fn new(script: Script) -> Scripted {
        Scripted {
            script,
            positions: Mutex::new(HashMap::new()),
            home: None,
        }
    }

    /// Start `session` from the first turn again.
    pub fn restart(&self, session: &str) {
        self.positions.lock().expect("positions").remove(session);
    }
}

fn last_of(messages: &[Value], role: &str) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == role)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The results of the latest batch of tool calls, joined with " | ".
fn last_tool_results(messages: &[Value]) -> String {
    let mut results: Vec<&str> = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().trim_end())
        .collect();
    results.reverse();
    results.join(" | ")
}

/// `value` with `fill` applied to every string in it (keys kept).
fn fill_strings(value: &Value, fill: &dyn Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(fill(s)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_strings(v, fill)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_strings(v, fill)))
                .collect(),
        ),
        other => other.clone(),
    }
}

impl Provider for Scripted {
    fn model(&self) -> String {
        "scripted".into()
    }

    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        // A new conversation (only the user's first message) starts the script over.
        let fresh = request
            .messages
            .iter()
            .filter(|m| m["role"] != "system")
            .count()
            <= 1;
        let index = {
            let mut positions = self.positions.lock().expect("positions");
            let at = positions.entry(request.session_key.clone()).or_insert(0);
            if fresh {
                *at = 0;
            }
            let index = *at;
            *at += 1;
            index
        };
        // Placeholders are filled in the text and in every string of the
        // tool calls' arguments.
        let user_message = last_of(&request.messages, "user");
        let home = self.home.as_ref().map(|h| h.display().to_string());
        // How many messages the model was sent, system prompts left out:
        // a session's history made visible in a scripted reply. Counted
        // only for a script that asks.
        let message_count = || {
            request
                .messages
                .iter()
                .filter(|m| m["role"] != "system")
                .count()
                .to_string()
        };
        let fill = |text: &str| {
            let mut text = text
                .replace("{tool_results}", &last_tool_results(&request.messages))
                .replace("{user_message}", &user_message);
            if text.contains("{message_count}") {
                text = text.replace("{message_count}", &message_count());
            }
            match &home {
                Some(home) => text.replace("{home}", home),
                None => text,
            }
        };
        let response = match self.script.turns.get(index) {
            Some(turn) => {
                let text = fill(&turn.say);
                let tool_calls = turn
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| ToolCallRequest {
                        id: format!("call_{index}_{i}"),
                        name: c.name.clone(),
                        arguments: if c.args.is_null() {
                            "{}".into()
                        } else {
                            fill_strings(&c.args, &fill).to_string()
                        },
                    })
                    .collect::<Vec<_>>();
                let finish_reason = if tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                };
                ChatResponse {
                    text,
                    tool_calls,
                    finish_reason: finish_reason.into(),
                    usage: turn.usage.clone(),
                    ..Default::default()
                }
            }
            None => ChatResponse {
                text: self
                    .script
                    .after_end
                    .clone()
                    .unwrap_or_else(|| "(the script has no more turns)".into()),
                finish_reason: "stop".into(),
                ..Default::default()
            },
        };
        if let Some(tx) = stream {
            for piece in response.text.split_inclusive(' ') {
                let _ = tx.send(StreamEvent::TextDelta(piece.to_string()));
            }
        }
        Box::pin(async move { Ok(response) })
    }
}
