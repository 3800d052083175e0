//! Model providers: what the loop asks a model, and what comes back.

pub mod openai;
pub mod plugin_model;
pub mod scripted;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::core::hooks::BoxFuture;
use crate::core::model_profiles::ModelProfiles;

/// One request: the system prompt, the conversation (OpenAI message
/// format), and the tools on offer (OpenAI function definitions).
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    pub model: String,
    pub system: String,
    /// Shared, as `tools` is: a request is cloned per attempt, and a long
    /// session's transcript is not copied for it.
    pub messages: std::sync::Arc<Vec<Value>>,
    /// Shared: the same definitions go to every call while the same tools
    /// are offered, and a request is cloned per attempt (no deep copy).
    pub tools: std::sync::Arc<Vec<Value>>,
    /// The session the request belongs to (scripted replies are per session).
    pub session_key: String,
    /// Extra request parameters a loop point set (`temperature`, …),
    /// merged into the request body.
    pub params: serde_json::Map<String, Value>,
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON object, as text).
    pub arguments: String,
}

/// The model's reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCallRequest>,
    pub usage: Map<String, Value>,
    pub finish_reason: String,
    /// Cut off by the output limit.
    pub truncated: bool,
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{0}")]
    Config(String),
    #[error("network error talking to {url}: {message}")]
    Network { url: String, message: String },
    #[error("the model API answered {status}: {message}")]
    Api { status: u16, message: String },
    #[error("unreadable answer from the model API: {0}")]
    Protocol(String),
    /// Nothing arrived for the idle timeout (not retried: a stalled server
    /// would cost a multiple of it).
    #[error("no answer from the model API at {url} for {seconds} s: raise the model timeout (--model-timeout SECS, model_timeout= in Python) if the model needs longer to start answering, or check the server")]
    Timeout { url: String, seconds: f64 },
    /// The answer broke off before it was complete on every attempt.
    #[error("the model API's answer broke off before it was complete ({detail}) on all {attempts} attempts; nothing of it was used: check the server or the network and try again")]
    Incomplete { attempts: u32, detail: String },
    #[error("{0}")]
    Script(String),
}

/// What a streamed model call yields as it goes. The boundary between two
/// model iterations of a turn is an item of its own, so a reader that
/// separates the iterations' text (serve's SSE output) decides on the type,
/// never on a marker inside the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// Text of the reply, as it arrives.
    TextDelta(String),
    /// A model call of the turn begins (sent by a provider that marks the
    /// iterations, such as serve's `IterationMarks`, before any of its text).
    IterationStart,
}

/// A text delta is equal to its text (and an iteration boundary to no
/// text), so a stream collected by a caller compares with the text it carried.
impl PartialEq<&str> for StreamEvent {
    fn eq(&self, other: &&str) -> bool {
        matches!(self, StreamEvent::TextDelta(text) if text == other)
    }
}

/// A source of assistant turns. Text deltas go to `stream` as they arrive.
pub trait Provider: Send + Sync + 'static {
    /// `provider:model`, for logs and hook contexts.
    fn model(&self) -> String;
    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>>;
}

/// Options for [`from_spec`].
#[derive(Clone, Debug, Default)]
pub struct ProviderOptions {
    /// `--base-url` (else `OPENAI_BASE_URL`, else the public OpenAI URL).
    pub base_url: Option<String>,
    /// `--script FILE` for the scripted provider.
    pub script: Option<std::path::PathBuf>,
    /// `--model-timeout`: how long the model API may stay silent (no
    /// response, no next chunk) before the call fails; `None` for
    /// [`openai::DEFAULT_MODEL_TIMEOUT`].
    pub model_timeout: Option<Duration>,
    /// The host's home, for the scripted provider's `{home}` placeholder
    /// (so a scripted reply names real paths).
    pub home: Option<std::path::PathBuf>,
    /// The model providers the host's plugins registered (`--model
    /// NAME:MODEL` for a name that is not `openai` or `scripted`).
    pub profiles: Option<Arc<ModelProfiles>>,
}

/// The longest timeout accepted anywhere a number of seconds is given: a
/// week, far past any useful wait and far inside what `Duration` and the
/// timer can hold.
pub const MAX_TIMEOUT_SECS: f64 = 7.0 * 24.0 * 3600.0;

/// A timeout given in seconds (a CLI flag, a Python keyword): positive,
/// finite and at most [`MAX_TIMEOUT_SECS`]; else what the value must be,
/// for the caller to put after the setting's name.
pub fn timeout_secs(seconds: f64) -> Result<Duration, String> {
    let wrong =
        || format!("must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECS} (a week)");
    if seconds.is_nan() || seconds <= 0.0 || seconds > MAX_TIMEOUT_SECS {
        return Err(wrong());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| wrong())
}

/// Build a provider from `PROVIDER:MODEL` (`openai:gpt-4o-mini`,
/// `scripted:demo`, `scripted:path/to/script.yaml`, or a plugin's model
/// provider `NAME:MODEL` from [`ProviderOptions::profiles`], over the
/// OpenAI-compatible transport).
pub fn from_spec(
    spec: &str,
    options: &ProviderOptions,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let (provider, model) = spec.split_once(':').unwrap_or((spec, ""));
    match provider {
        "openai" => {
            if model.is_empty() {
                return Err(ProviderError::Config(
                    "name the model: --model openai:MODEL (e.g. openai:gpt-4o-mini)".into(),
                ));
            }
            let mut provider = openai::OpenAi::from_env(model, options.base_url.clone())?;
            if let Some(timeout) = options.model_timeout {
                provider.set_timeout(timeout)?;
            }
            Ok(Arc::new(provider))
        }
        "scripted" => {
            let script = match (&options.script, model) {
                (Some(path), _) => scripted::Script::load(path)?,
                (None, "" | "demo") => scripted::Script::demo(),
                (None, path) => scripted::Script::load(std::path::Path::new(path))?,
            };
            let mut scripted = scripted::Scripted::new(script);
            scripted.home = options.home.clone();
            Ok(Arc::new(scripted))
        }
        other => match options.profiles.as_ref().and_then(|p| p.find(other)) {
            Some(profile)
                if profile.transport == crate::core::model_profiles::Transport::Plugin =>
            {
                Ok(Arc::new(plugin_model::PluginProvider::for_profile(
                    &profile, model,
                )?))
            }
            Some(profile) => {
                let mut provider =
                    openai::OpenAi::for_profile(&profile, model, options.base_url.as_deref())?;
                if let Some(timeout) = options.model_timeout {
                    provider.set_timeout(timeout)?;
                }
                Ok(Arc::new(provider))
            }
            None => {
                let plugins: Vec<String> = options
                    .profiles
                    .iter()
                    .flat_map(|p| p.all())
                    .map(|p| format!("{}:MODEL", p.name))
                    .collect();
                let extra = if plugins.is_empty() {
                    String::new()
                } else {
                    format!(", or a plugin's model provider: {}", plugins.join(", "))
                };
                Err(ProviderError::Config(format!(
                    "unknown model provider '{other}': use openai:MODEL or scripted[:SCRIPT]{extra}"
                )))
            }
        },
    }
}
