//! Any OpenAI-compatible Chat Completions endpoint, streamed.
//!
//! `--model openai:MODEL`; base URL from `--base-url`, else
//! `OPENAI_BASE_URL`, else `https://api.openai.com/v1`; key from
//! `OPENAI_API_KEY` (optional for local servers). Streams text deltas and
//! tool-call fragments; retries 429 and 5xx, connection failures and answers
//! cut short with backoff, honouring `Retry-After`; other 4xx fail at once
//! with the API's own message.
//!
//! Every wait is bounded: connecting by [`CONNECT_TIMEOUT`], the response
//! and each next chunk of it by the model timeout (`--model-timeout`, not
//! retried: a stalled server would cost a multiple of it). Every buffer is
//! bounded by [`sse::Limits`]. An answer that ends before `[DONE]` or a
//! `finish_reason` is never used.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::sse::{self, SseError, StreamParser};
use super::{ChatRequest, ChatResponse, Provider, ProviderError, StreamEvent};
use crate::core::hooks::BoxFuture;
use crate::core::model_profiles::ModelProfile;

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const MAX_ATTEMPTS: u32 = 4;
/// How long the model API may stay silent: long enough for a local server
/// to read a long prompt or a reasoning model to think before its first
/// token, short enough that a stalled server fails the turn.
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest wait for a TCP/TLS connection (shorter if the model timeout is).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes of an error response kept for its message.
const MAX_ERROR_BODY: usize = 64 << 10;
/// Shown in the live stream when an answer broke off after some of its
/// text was shown, before the same question is asked again.
const RETRY_NOTICE: &str = "\n[the model's answer broke off; asking again]\n";

pub struct OpenAi {
    /// The provider's name in `--model NAME:MODEL` (`openai`, or a
    /// plugin's model provider).
    name: String,
    model: String,
    base_url: String,
    /// Sent with every request (a plugin profile's headers).
    headers: Vec<(String, String)>,
    api_key: Option<String>,
    client: reqwest::Client,
    timeout: Duration,
    /// First retry delay; doubles per attempt.
    pub backoff: Duration,
    /// Bounds on one answer.
    pub limits: sse::Limits,
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
        Ok(OpenAi {
            name: "openai".into(),
            model: model.to_string(),
            base_url: base_url.trim_end_matches('/').to_string(),
            headers: Vec::new(),
            api_key,
            client: client(DEFAULT_MODEL_TIMEOUT)?,
            timeout: DEFAULT_MODEL_TIMEOUT,
            backoff: Duration::from_millis(500),
            limits: sse::Limits::default(),
        })
    }

    /// A plugin's model provider: its endpoint (`base_url` when given,
    /// `--base-url`; else its base-URL variable's value, else its declared
    /// base URL) and headers, the key of its first set key variable, the
    /// model `model` (else its first listed).
    pub fn for_profile(
        profile: &ModelProfile,
        model: &str,
        base_url: Option<&str>,
    ) -> Result<OpenAi, ProviderError> {
        let mut profile = profile.clone();
        if let Some(url) = base_url.map(str::trim).filter(|u| !u.is_empty()) {
            profile.base_url = url.to_string();
            profile.base_url_var = None;
        }
        let profile = &profile;
        if let Some(why) = profile.unusable() {
            return Err(ProviderError::Config(why));
        }
        let model = profile.pick_model(model).map_err(ProviderError::Config)?;
        let api_key = profile.key().map(|(_, v)| v);
        if api_key.is_none() && !profile.key_vars.is_empty() {
            return Err(ProviderError::Config(format!(
                "model provider '{}' (plugin '{}') needs its key: set {}",
                profile.name,
                profile.plugin,
                profile.key_vars.join(" or ")
            )));
        }
        Ok(OpenAi {
            name: profile.name.clone(),
            model,
            base_url: profile.endpoint().0.trim_end_matches('/').to_string(),
            headers: profile.headers.clone(),
            api_key,
            client: client(DEFAULT_MODEL_TIMEOUT)?,
            timeout: DEFAULT_MODEL_TIMEOUT,
            backoff: Duration::from_millis(500),
            limits: sse::Limits::default(),
        })
    }

    /// How long the API may stay silent before a call fails (see
    /// [`super::timeout_secs`] for the accepted range).
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), ProviderError> {
        self.client = client(timeout)?;
        self.timeout = timeout;
        Ok(())
    }

    fn body(&self, request: &ChatRequest) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if !request.system.is_empty() {
            messages.push(json!({"role": "system", "content": request.system}));
        }
        messages.extend(request.messages.iter().cloned());
        // A loop point may route this call to another model of the provider.
        let prefix = format!("{}:", self.name);
        let model = request
            .model
            .strip_prefix(prefix.as_str())
            .or_else(|| request.model.strip_prefix("openai:"))
            .unwrap_or(&request.model);
        let model = if model.is_empty() { &self.model } else { model };
        let mut body = json!({
            "model": model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.to_vec());
        }
        for (k, v) in &request.params {
            if !matches!(k.as_str(), "model" | "messages" | "tools" | "stream") {
                body[k] = v.clone();
            }
        }
        body
    }
}

impl Provider for OpenAi {
    fn model(&self) -> String {
        format!("{}:{}", self.name, self.model)
    }

    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        let call = Call {
            url: format!("{}/chat/completions", self.base_url),
            body: self.body(&request),
            client: self.client.clone(),
            key: self.api_key.clone(),
            headers: self.headers.clone(),
            timeout: self.timeout,
            limits: self.limits,
        };
        let backoff = self.backoff;
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let mut shown = false;
                let failure = match call.attempt(stream.as_ref(), &mut shown).await {
                    Ok(response) => return Ok(response),
                    Err(failure) => failure,
                };
                let last = attempt >= MAX_ATTEMPTS;
                let (error, retry_after) = match failure {
                    Failure::Fatal(error) => return Err(error),
                    Failure::Retry { error, .. } if last => return Err(error),
                    Failure::Cut(detail) if last => {
                        return Err(ProviderError::Incomplete {
                            attempts: attempt,
                            detail,
                        })
                    }
                    Failure::Retry { error, after } => (error.to_string(), after),
                    Failure::Cut(detail) => (format!("the answer broke off: {detail}"), None),
                };
                tracing::warn!("{error}; retrying (attempt {attempt} of {MAX_ATTEMPTS})");
                if shown {
                    if let Some(tx) = &stream {
                        let _ = tx.send(StreamEvent::TextDelta(RETRY_NOTICE.to_string()));
                    }
                }
                tokio::time::sleep(retry_after.unwrap_or(backoff * 2u32.pow(attempt - 1))).await;
            }
        })
    }
}

/// The HTTP client: connection attempts bounded by [`CONNECT_TIMEOUT`], or
/// by the model timeout when that is shorter.
fn client(timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(timeout))
        .build()
        .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))
}

/// How one attempt failed, which decides whether to try again.
enum Failure {
    /// Worth another attempt (unreachable, 429, 5xx); `error` is final on the last.
    Retry {
        error: ProviderError,
        after: Option<Duration>,
    },
    /// The answer ended before it was complete (or the connection broke
    /// mid-answer): worth another attempt.
    Cut(String),
    /// Not worth another attempt.
    Fatal(ProviderError),
}

/// Everything one request needs, cloned out of the provider.
struct Call {
    url: String,
    body: Value,
    client: reqwest::Client,
    key: Option<String>,
    headers: Vec<(String, String)>,
    timeout: Duration,
    limits: sse::Limits,
}

impl Call {
    fn timed_out(&self) -> Failure {
        Failure::Fatal(ProviderError::Timeout {
            url: self.url.clone(),
            seconds: self.timeout.as_secs_f64(),
        })
    }

    /// One request and its answer; text deltas go to `stream` as they come
    /// (`shown` records that some did).
    async fn attempt(
        &self,
        stream: Option<&UnboundedSender<StreamEvent>>,
        shown: &mut bool,
    ) -> Result<ChatResponse, Failure> {
        let mut request = self.client.post(&self.url).json(&self.body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let mut response = match tokio::time::timeout(self.timeout, request.send()).await {
            Err(_) => return Err(self.timed_out()),
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                let error = ProviderError::Network {
                    url: self.url.clone(),
                    message: cause_chain(&e),
                };
                // Refused, reset or closed before an answer: try again.
                return Err(if e.is_connect() || e.is_timeout() || e.is_request() {
                    Failure::Retry { error, after: None }
                } else {
                    Failure::Fatal(error)
                });
            }
        };
        let status = response.status();
        if !status.is_success() {
            return Err(self.refused(response).await);
        }
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !is_sse {
            // A server that ignores `stream`: one JSON completion.
            let mut body = Vec::new();
            while let Some(chunk) = self.next_chunk(&mut response).await? {
                if body.len() + chunk.len() > self.limits.max_total {
                    return Err(self.unreadable(SseError::TooLarge {
                        limit: self.limits.max_total,
                    }));
                }
                body.extend_from_slice(&chunk);
            }
            return sse::parse_completion(&body).map_err(|e| self.unreadable(e));
        }
        let mut parser = StreamParser::new(self.limits);
        while let Some(chunk) = self.next_chunk(&mut response).await? {
            let deltas = parser.feed(&chunk).map_err(|e| self.unreadable(e))?;
            self.show(stream, deltas, shown);
            if parser.is_done() {
                break;
            }
        }
        let (answer, deltas) = parser.finish().map_err(|e| self.unreadable(e))?;
        self.show(stream, deltas, shown);
        Ok(answer)
    }

    fn show(
        &self,
        stream: Option<&UnboundedSender<StreamEvent>>,
        deltas: Vec<String>,
        shown: &mut bool,
    ) {
        let Some(tx) = stream else { return };
        for delta in deltas {
            *shown = true;
            let _ = tx.send(StreamEvent::TextDelta(delta));
        }
    }

    /// The next chunk of the body within the model timeout; `None` at its end.
    async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
    ) -> Result<Option<impl std::ops::Deref<Target = [u8]>>, Failure> {
        match tokio::time::timeout(self.timeout, response.chunk()).await {
            Err(_) => Err(self.timed_out()),
            Ok(Ok(chunk)) => Ok(chunk),
            Ok(Err(e)) => Err(Failure::Cut(format!("the connection broke: {e}"))),
        }
    }

    /// A decoding failure: a cut answer is retried, an API error in the
    /// stream and a broken limit are final.
    fn unreadable(&self, error: SseError) -> Failure {
        match error {
            SseError::Incomplete => Failure::Cut(error.to_string()),
            SseError::Api(message) => Failure::Fatal(ProviderError::Api {
                status: 200,
                message,
            }),
            other => Failure::Fatal(ProviderError::Protocol(format!(
                "{other}; check the server at {}",
                self.url
            ))),
        }
    }

    /// A non-2xx answer: 429 and 5xx are retried (after `Retry-After`, at
    /// most a minute), the rest are final with the API's own message.
    async fn refused(&self, mut response: reqwest::Response) -> Failure {
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(60.0)));
        // The message is read within the limits too (size, and the model
        // timeout for all of it); a body that stalls or breaks off leaves
        // what arrived.
        let mut body = Vec::new();
        let _ = tokio::time::timeout(self.timeout, async {
            while body.len() < MAX_ERROR_BODY {
                match response.chunk().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    _ => break,
                }
            }
        })
        .await;
        body.truncate(MAX_ERROR_BODY);
        let text = String::from_utf8_lossy(&body);
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| text.chars().take(500).collect());
        let error = ProviderError::Api {
            status: status.as_u16(),
            message,
        };
        if status.as_u16() == 429 || status.is_server_error() {
            Failure::Retry {
                error,
                after: retry_after,
            }
        } else {
            Failure::Fatal(error)
        }
    }
}

/// An error and its causes, `outer: inner: innermost` (reqwest's own text
/// stops at "error sending request", hiding "Connection refused"); a
/// cause whose text the previous one already contains is skipped.
fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}
