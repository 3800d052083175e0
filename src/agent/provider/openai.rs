//! Any OpenAI-compatible Chat Completions endpoint, streamed.
//!
//! `--model openai:MODEL`; base URL from `--base-url`, else
//! `OPENAI_BASE_URL`, else `https://api.openai.com/v1`; key from
//! `OPENAI_API_KEY` (optional for local servers). Streams text deltas and
//! tool-call fragments; retries 429 and 5xx (and connection failures) with
//! backoff, honouring `Retry-After`; other 4xx fail at once with the API's
//! own message.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::{ChatRequest, ChatResponse, Provider, ProviderError, ToolCallRequest};
use crate::hooks::BoxFuture;

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const MAX_ATTEMPTS: u32 = 4;

pub struct OpenAi {
    model: String,
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    /// First retry delay; doubles per attempt.
    pub backoff: Duration,
}

impl OpenAi {
    pub fn from_env(model: &str, base_url: Option<String>) -> Result<OpenAi, ProviderError> {
        let base_url = base_url
            .or_else(|| {
                std::env::var("OPENAI_BASE_URL")
                    .ok()
                    .filter(|v| !v.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_BASE_URL.into());
        let api_key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|v| !v.is_empty());
        if api_key.is_none() && base_url == DEFAULT_BASE_URL {
            return Err(ProviderError::Config(
                "OPENAI_API_KEY is not set: export it, or point --base-url / OPENAI_BASE_URL at a compatible server".into(),
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(OpenAi {
            model: model.to_string(),
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            client,
            backoff: Duration::from_millis(500),
        })
    }

    fn body(&self, request: &ChatRequest) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if !request.system.is_empty() {
            messages.push(json!({"role": "system", "content": request.system}));
        }
        messages.extend(request.messages.iter().cloned());
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.clone());
        }
        body
    }
}

impl Provider for OpenAi {
    fn model(&self) -> String {
        format!("openai:{}", self.model)
    }

    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<UnboundedSender<String>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        let url = format!("{}/chat/completions", self.base_url);
        let body = self.body(&request);
        let client = self.client.clone();
        let key = self.api_key.clone();
        let backoff = self.backoff;
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let mut call = client.post(&url).json(&body);
                if let Some(key) = &key {
                    call = call.bearer_auth(key);
                }
                let retry_in = |retry_after: Option<Duration>| {
                    retry_after.unwrap_or(backoff * 2u32.pow(attempt - 1))
                };
                let response = match call.send().await {
                    Ok(r) => r,
                    Err(e) if attempt < MAX_ATTEMPTS && (e.is_connect() || e.is_timeout()) => {
                        tracing::warn!("model API unreachable ({e}); retrying");
                        tokio::time::sleep(retry_in(None)).await;
                        continue;
                    }
                    Err(e) => {
                        return Err(ProviderError::Network {
                            url,
                            message: e.to_string(),
                        })
                    }
                };
                let status = response.status();
                if status.is_success() {
                    return read_stream(response, stream).await;
                }
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .map(|s| Duration::from_secs_f64(s.min(60.0)));
                let text = response.text().await.unwrap_or_default();
                let message = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| text.chars().take(500).collect());
                if (status.as_u16() == 429 || status.is_server_error()) && attempt < MAX_ATTEMPTS {
                    tracing::warn!("model API answered {status} ({message}); retrying (attempt {attempt} of {MAX_ATTEMPTS})");
                    tokio::time::sleep(retry_in(retry_after)).await;
                    continue;
                }
                return Err(ProviderError::Api {
                    status: status.as_u16(),
                    message,
                });
            }
        })
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Read a `text/event-stream` of chat.completion.chunk objects (or, from a
/// server that ignores `stream`, one JSON completion).
async fn read_stream(
    response: reqwest::Response,
    stream: Option<UnboundedSender<String>>,
) -> Result<ChatResponse, ProviderError> {
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !is_sse {
        let value: Value = response
            .json()
            .await
            .map_err(|e| ProviderError::Protocol(e.to_string()))?;
        return Ok(from_completion(&value));
    }
    let mut out = ChatResponse::default();
    let mut calls: Vec<PartialCall> = Vec::new();
    let mut buffer = String::new();
    let mut bytes = response.bytes_stream();
    'outer: while let Some(chunk) = bytes.next().await {
        let chunk = chunk.map_err(|e| ProviderError::Protocol(format!("stream broke off: {e}")))?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line = buffer[..end].trim_end_matches('\r').to_string();
            buffer.drain(..=end);
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                break 'outer;
            }
            let event: Value = serde_json::from_str(data)
                .map_err(|e| ProviderError::Protocol(format!("bad stream event: {e}")))?;
            if let Some(err) = event.get("error") {
                return Err(ProviderError::Api {
                    status: 200,
                    message: err["message"].as_str().unwrap_or("error in stream").into(),
                });
            }
            if let Some(Value::Object(usage)) = event.get("usage") {
                out.usage = usage.clone();
            }
            let Some(choice) = event["choices"].get(0) else {
                continue;
            };
            if let Some(reason) = choice["finish_reason"].as_str() {
                out.finish_reason = reason.to_string();
            }
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str() {
                out.text.push_str(text);
                if let Some(tx) = &stream {
                    let _ = tx.send(text.to_string());
                }
            }
            for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = fragment["index"].as_u64().unwrap_or(calls.len() as u64) as usize;
                while calls.len() <= index {
                    calls.push(PartialCall::default());
                }
                let call = &mut calls[index];
                if let Some(id) = fragment["id"].as_str() {
                    call.id = id.to_string();
                }
                if let Some(name) = fragment["function"]["name"].as_str() {
                    call.name.push_str(name);
                }
                if let Some(args) = fragment["function"]["arguments"].as_str() {
                    call.arguments.push_str(args);
                }
            }
        }
    }
    out.tool_calls = calls
        .into_iter()
        .enumerate()
        .filter(|(_, c)| !c.name.is_empty())
        .map(|(i, c)| ToolCallRequest {
            id: if c.id.is_empty() {
                format!("call_{i}")
            } else {
                c.id
            },
            name: c.name,
            arguments: if c.arguments.trim().is_empty() {
                "{}".into()
            } else {
                c.arguments
            },
        })
        .collect();
    out.truncated = out.finish_reason == "length";
    Ok(out)
}

fn from_completion(value: &Value) -> ChatResponse {
    let choice = &value["choices"][0];
    let message = &choice["message"];
    let finish_reason = choice["finish_reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ChatResponse {
        text: message["content"].as_str().unwrap_or_default().to_string(),
        tool_calls: message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| ToolCallRequest {
                id: c["id"].as_str().unwrap_or_default().to_string(),
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                arguments: c["function"]["arguments"]
                    .as_str()
                    .unwrap_or("{}")
                    .to_string(),
            })
            .collect(),
        usage: value["usage"].as_object().cloned().unwrap_or_else(Map::new),
        truncated: finish_reason == "length",
        finish_reason,
    }
}
