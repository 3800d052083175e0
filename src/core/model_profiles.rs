//! Model providers plugins declare ([`ModelProfile`]): a name the user
//! picks with `--model NAME:MODEL`, the endpoint, its headers and the
//! environment variables its key is read from. A dialect records the
//! profiles its plugins register in the host's [`ModelProfiles`] (its
//! extension map); the agent's provider table builds a model from one.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The wire protocol a profile's endpoint speaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// OpenAI's Chat Completions (`POST {base_url}/chat/completions`).
    ChatCompletions,
    /// Any other (Hermes's `anthropic_messages`, `codex_responses`, …),
    /// by its name: recorded and refused with a reason when picked.
    Other(String),
    /// The plugin's own code (Felix's model provider factories): each call
    /// runs it where the plugin runs ([`ModelProfile::code`]).
    Plugin,
}

/// A model provider whose calls run plugin code: one chat call of `model`.
/// `request` is `{"system", "messages", "tools", "params"}` (OpenAI's
/// shapes); the answer `{"text", "tool_calls": [{"id", "name",
/// "arguments"}], "usage", "finish_reason"}`, or why the call failed.
pub trait PluginModel: Send + Sync {
    fn chat(
        &self,
        model: String,
        request: serde_json::Value,
    ) -> crate::core::points::BoxFuture<Result<serde_json::Value, String>>;
}

/// The code behind a [`Transport::Plugin`] profile (none on the wire: a
/// worker's profile gets its proxy on the host's side).
#[derive(Clone, Default)]
pub struct CodeHandle(pub Option<std::sync::Arc<dyn PluginModel>>);

impl std::fmt::Debug for CodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "code" } else { "no code" })
    }
}

impl PartialEq for CodeHandle {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for CodeHandle {}

/// One model provider a plugin registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelProfile {
    /// What `--model NAME:MODEL` names.
    pub name: String,
    /// Other names for it.
    pub aliases: Vec<String>,
    /// The plugin that registered it, and its dialect.
    pub plugin: String,
    pub dialect: String,
    pub base_url: String,
    /// The environment variable whose value, when set, replaces
    /// `base_url` (Hermes: the `env_vars` entry ending in `_BASE_URL` or
    /// `_URL`, else its built-in provider's variable): a self-hosted or
    /// local endpoint of the same API.
    #[serde(default)]
    pub base_url_var: Option<String>,
    /// Sent with every request (Hermes's `default_headers`).
    pub headers: Vec<(String, String)>,
    /// Environment variables the key is read from, the first set one
    /// winning (Hermes's `env_vars`); sent as `Authorization: Bearer`.
    pub key_vars: Vec<String>,
    /// The models it lists (Hermes's `fallback_models`); the first is the
    /// model used when `--model NAME` names none.
    pub models: Vec<String>,
    pub transport: Transport,
    /// How the key is obtained (Hermes's `auth_type`): only `api_key` (or
    /// none) can be used by plughost.
    pub auth: String,
    /// The code a [`Transport::Plugin`] profile calls.
    #[serde(skip)]
    pub code: CodeHandle,
}

impl ModelProfile {
    /// The first of [`ModelProfile::key_vars`] that is set (non-empty), with its value.
    pub fn key(&self) -> Option<(String, String)> {
        self.key_vars.iter().find_map(|var| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (var.clone(), v))
        })
    }

    /// Where calls go: the base-URL variable's value when it is set, else
    /// the declared base URL; with the variable that set it, if one did.
    pub fn endpoint(&self) -> (String, Option<&str>) {
        if let Some(var) = &self.base_url_var {
            if let Some(url) = std::env::var(var)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
            {
                return (url, Some(var));
            }
        }
        (self.base_url.trim().to_string(), None)
    }

    /// Whether `name` is this profile's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }

    /// The model a call uses: `model`, else the first the profile lists;
    /// `Err` says how to name one.
    pub fn pick_model(&self, model: &str) -> Result<String, String> {
        match (model, self.models.first()) {
            ("", Some(first)) => Ok(first.clone()),
            ("", None) => Err(format!(
                "name the model: --model {}:MODEL (model provider '{}' of '{}' lists none)",
                self.name, self.name, self.plugin
            )),
            (m, _) => Ok(m.to_string()),
        }
    }

    /// Why plughost cannot call this provider, if it cannot.
    pub fn unusable(&self) -> Option<String> {
        if self.transport == Transport::Plugin {
            return self.code.0.is_none().then(|| {
                format!(
                    "model provider '{}' ({}) is plugin code that is not running here",
                    self.name, self.plugin
                )
            });
        }
        if let Transport::Other(mode) = &self.transport {
            return Some(format!(
                "model provider '{}' ({}) speaks '{mode}', and plughost calls model providers over the OpenAI-compatible Chat Completions transport only",
                self.name, self.plugin
            ));
        }
        if !matches!(self.auth.as_str(), "" | "api_key") {
            return Some(format!(
                "model provider '{}' ({}) authenticates with '{}', and plughost reads a provider's key from its environment variables only (auth_type api_key)",
                self.name, self.plugin, self.auth
            ));
        }
        if self.endpoint().0.is_empty() {
            let how = match &self.base_url_var {
                Some(var) => format!("set {var}, or pass --base-url"),
                None => "pass --base-url".to_string(),
            };
            return Some(format!(
                "model provider '{}' ({}) declares no base URL: {how}",
                self.name, self.plugin
            ));
        }
        None
    }

    /// `plugins doctor`'s line: the provider, its endpoint and whether its key is set.
    pub fn doctor_line(&self) -> String {
        let key = match (self.key(), self.key_vars.is_empty()) {
            (Some((var, _)), _) => format!("key set ({var})"),
            (None, true) => "no key needed".to_string(),
            (None, false) => format!("key NOT set (set {})", self.key_vars.join(" or ")),
        };
        let usable = match self.unusable() {
            Some(why) => format!("; cannot be used: {why}"),
            None => format!("; use it with --model {}:MODEL", self.name),
        };
        if self.transport == Transport::Plugin {
            return format!("model provider {} (plugin code){usable}", self.name);
        }
        let at = match self.endpoint() {
            (url, Some(var)) => format!("{url} (from {var})"),
            (url, None) if url.is_empty() => "no base URL".to_string(),
            (url, None) => url,
        };
        format!("model provider {} at {at}: {key}{usable}", self.name)
    }
}

/// The model providers of a host's plugins, in registration order; a later
/// profile of the same name replaces the earlier one.
#[derive(Default, Debug)]
pub struct ModelProfiles(Mutex<Vec<ModelProfile>>);

impl ModelProfiles {
    pub fn add(&self, profile: ModelProfile) {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|p| p.name != profile.name);
        list.push(profile);
    }

    /// The profile `name` names (its name or an alias).
    pub fn find(&self, name: &str) -> Option<ModelProfile> {
        let list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.iter().find(|p| p.answers_to(name)).cloned()
    }

    /// Whether a profile of this name is recorded.
    pub fn has(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    pub fn all(&self) -> Vec<ModelProfile> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The profiles plugin `plugin` registered.
    pub fn of(&self, plugin: &str) -> Vec<ModelProfile> {
        let list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .filter(|p| p.plugin == plugin)
            .cloned()
            .collect()
    }
}
