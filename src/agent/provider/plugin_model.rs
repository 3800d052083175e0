//! A model provider that is a plugin's code (Felix's
//! `register_model_provider`): `--model NAME:MODEL` names it, and each
//! call goes to its [`PluginModel`] (in-process, or in the plugin's worker)
//! as OpenAI-shaped JSON; its answer becomes the turn's reply.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::{ChatRequest, ChatResponse, Provider, ProviderError, StreamEvent, ToolCallRequest};
use crate::core::model_profiles::{ModelProfile, PluginModel};
use crate::core::points::BoxFuture;

pub struct PluginProvider {
    name: String,
    model: String,
    code: Arc<dyn PluginModel>,
}

impl PluginProvider {
    /// Model `model` of `profile`'s code (its first listed model when empty).
    pub fn for_profile(profile: &ModelProfile, model: &str) -> Result<Self, ProviderError> {
        if let Some(why) = profile.unusable() {
            return Err(ProviderError::Config(why));
        }
        let code = profile.code.0.clone().ok_or_else(|| {
            ProviderError::Config(format!("model provider '{}' has no code", profile.name))
        })?;
        let model = profile.pick_model(model).map_err(ProviderError::Config)?;
        Ok(PluginProvider {
            name: profile.name.clone(),
            model,
            code,
        })
    }
}

impl Provider for PluginProvider {
    fn model(&self) -> String {
        format!("{}:{}", self.name, self.model)
    }

    /// One call of the plugin's model; its text goes to `stream` whole
    /// (the plugin's `chat` answers in one piece).
    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        let body = json!({
            "system": request.system,
            "messages": *request.messages,
            "tools": *request.tools,
            "params": request.params,
        });
        let call = self.code.chat(self.model.clone(), body);
        let name = self.name.clone();
        Box::pin(async move {
            let answer = call.await.map_err(|message| ProviderError::Api {
                status: 500,
                message: format!("model provider '{name}': {message}"),
            })?;
            let response = response_of(&answer).map_err(ProviderError::Protocol)?;
            if let Some(tx) = stream.filter(|_| !response.text.is_empty()) {
                let _ = tx.send(StreamEvent::TextDelta(response.text.clone()));
            }
            Ok(response)
        })
    }
}

/// The reply in `answer` (see [`PluginModel::chat`]).
fn response_of(answer: &Value) -> Result<ChatResponse, String> {
    let text = answer["text"].as_str().unwrap_or_default().to_string();
    let mut tool_calls = Vec::new();
    for call in answer["tool_calls"].as_array().into_iter().flatten() {
        let name = call["name"]
            .as_str()
            .ok_or_else(|| format!("a tool call without a name: {call}"))?;
        let arguments = match &call["arguments"] {
            Value::String(s) => s.clone(),
            Value::Null => "{}".to_string(),
            other => other.to_string(),
        };
        tool_calls.push(ToolCallRequest {
            id: call["id"].as_str().unwrap_or_default().to_string(),
            name: name.to_string(),
            arguments,
        });
    }
    let finish_reason = match answer["finish_reason"].as_str() {
        Some(r) => r.to_string(),
        None if tool_calls.is_empty() => "stop".to_string(),
        None => "tool_calls".to_string(),
    };
    Ok(ChatResponse {
        text,
        tool_calls,
        usage: answer["usage"].as_object().cloned().unwrap_or_default(),
        truncated: finish_reason == "length",
        finish_reason,
    })
}
