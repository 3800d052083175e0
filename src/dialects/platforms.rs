//! Messaging platforms as plughost's gateway (`crate::gateway`) sees them,
//! whatever dialect registered them: a [`PlatformFactory`] per registered
//! platform, which makes a [`PlatformPort`] (one adapter) each time the
//! gateway (re)connects it. The port is deliberately narrow — inbound
//! messages come in through an [`Inlet`], replies go out through `send`
//! and `edit` — so that an adapter can live in another process (an
//! isolated plugin's worker) behind the same four calls.
//!
//! The table ([`PlatformTable`]) is one of the host's typed extensions:
//! a dialect fills it when a plugin registering a platform has loaded,
//! the gateway reads it when `serve` starts, writes each platform's state
//! into it (read by `/healthz`), and puts its [`ChatInjector`] there for
//! the dialects' `inject_message`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::core::hooks::BoxFuture;

/// One inbound message, as an adapter normalized it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InboundChat {
    /// The platform's name (`irc`, `telegram`, …).
    pub platform: String,
    /// The session the message belongs to (the dialect's key of its chat).
    pub session_key: String,
    pub chat_id: String,
    /// `dm`, `group`, `channel`, `thread`.
    pub chat_type: String,
    pub chat_name: Option<String>,
    pub user_id: Option<String>,
    pub user_name: Option<String>,
    pub thread_id: Option<String>,
    pub message_id: Option<String>,
    pub reply_to_message_id: Option<String>,
    pub text: String,
    /// `text`, `photo`, `voice`, … (the dialect's message types).
    pub message_type: String,
    pub media_urls: Vec<String>,
    pub media_types: Vec<String>,
    /// Made by plughost (an injected message), not typed by a user.
    pub internal: bool,
}

impl InboundChat {
    /// Where a reply to this message goes.
    pub fn address(&self) -> ChatAddress {
        ChatAddress {
            chat_id: self.chat_id.clone(),
            thread_id: self.thread_id.clone(),
        }
    }

    /// The message's fields as a JSON object: what the agent's inbound
    /// metadata carries under `source`, for the gateway hooks.
    pub fn source_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// Where a message is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatAddress {
    pub chat_id: String,
    pub thread_id: Option<String>,
}

/// What an adapter tells the gateway.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PortSignal {
    Message(Box<InboundChat>),
    /// The adapter lost its connection (or cannot connect): the gateway
    /// disconnects it and, when `retryable`, connects a new one after a
    /// backoff.
    Fatal {
        code: String,
        message: String,
        retryable: bool,
    },
    /// An event of the platform that is not a message (a reaction, an
    /// edit): `{"platform", "event_type", "payload"}`, as Hermes's
    /// adapters hand it to the gateway.
    PlatformEvent(serde_json::Map<String, serde_json::Value>),
}

/// The gateway's end of a platform's adapter: what the adapter sends it.
pub type Inlet = tokio::sync::mpsc::UnboundedSender<PortSignal>;

/// A platform an isolated plugin registered, as its worker describes it
/// (the factory stays in the worker; the host drives it through the
/// worker protocol, one [`PortOp`] at a time).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PlatformSnapshot {
    pub name: String,
    pub label: String,
    pub plugin: String,
    /// As the worker judged it when the plugin loaded.
    pub readiness: Readiness,
    pub settings: ChatSettings,
}

/// One call of the gateway on a platform whose adapter runs in a worker:
/// [`PlatformFactory::create`] and the four calls of its [`PlatformPort`],
/// and `Watch`, which the worker answers only when it ends (so the host
/// learns its adapter is gone).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum PortOp {
    Create,
    Connect,
    Disconnect,
    Send {
        to: ChatAddress,
        text: String,
        reply_to: Option<String>,
    },
    Edit {
        to: ChatAddress,
        message_id: String,
        text: String,
    },
    Watch,
    /// [`PlatformPort::act`].
    Act {
        verb: String,
        args: serde_json::Value,
    },
}

/// One connected (or connecting) adapter.
pub trait PlatformPort: Send + Sync {
    /// Connect and start receiving (messages then arrive on the inlet the
    /// port was made with). `Err` says why it could not, and whether
    /// trying again may help.
    fn connect(&self) -> BoxFuture<Result<(), PortError>>;
    /// Stop receiving and close the connection.
    fn disconnect(&self) -> BoxFuture<()>;
    /// Send `text` to `to`; the sent message's id when the platform gives one.
    fn send(
        &self,
        to: ChatAddress,
        text: String,
        reply_to: Option<String>,
    ) -> BoxFuture<Result<Option<String>, String>>;
    /// Replace the text of a message sent earlier; `Err` when the platform
    /// cannot (the caller then sends a new message).
    fn edit(
        &self,
        to: ChatAddress,
        message_id: String,
        text: String,
    ) -> BoxFuture<Result<(), String>>;
    /// Act on platform `platform` as the gateway's bot (a plugin's
    /// `platform_actions` verb: a reaction, a thread's title): the result
    /// as the dialect's JSON object. By default no verb is implemented.
    fn act(
        &self,
        platform: String,
        verb: String,
        args: serde_json::Value,
    ) -> BoxFuture<serde_json::Value> {
        let _ = args;
        Box::pin(async move { unsupported_action(&platform, &verb) })
    }
}

/// Hermes's answer to a verb a platform does not implement.
pub fn unsupported_action(platform: &str, verb: &str) -> serde_json::Value {
    serde_json::json!({
        "ok": false,
        "error": "unsupported_platform_action",
        "detail": format!("{verb} is not implemented for {platform}"),
    })
}

/// Why an adapter did not connect.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PortError {
    pub message: String,
    pub retryable: bool,
}

/// How a platform's chats are served, from its configuration.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ChatSettings {
    /// Tool calls are shown in the chat while a turn runs.
    pub tool_progress: bool,
    /// A text arriving while the chat's turn runs is appended to the one
    /// waiting (instead of replacing it).
    pub merge_text: bool,
    /// The wait before the first reconnection; each next one doubles it.
    pub reconnect_delay: std::time::Duration,
    /// The longest wait between reconnections.
    pub reconnect_max: std::time::Duration,
}

impl Default for ChatSettings {
    fn default() -> Self {
        ChatSettings {
            tool_progress: true,
            merge_text: false,
            reconnect_delay: std::time::Duration::from_secs(2),
            reconnect_max: std::time::Duration::from_secs(60),
        }
    }
}

/// Whether a registered platform is to run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Readiness {
    Enabled,
    /// Not enabled in the configuration (the reason says where to enable it).
    Disabled(String),
    /// Enabled, but its requirements are not met (`check_fn`, configuration).
    Unavailable(String),
}

/// A registered platform.
pub trait PlatformFactory: Send + Sync {
    fn name(&self) -> &str;
    fn label(&self) -> &str;
    /// The plugin that registered it.
    fn plugin(&self) -> &str;
    fn readiness(&self) -> Readiness;
    fn settings(&self) -> ChatSettings;
    /// A new adapter whose inbound messages go to `inlet`.
    fn create(&self, inlet: Inlet) -> Result<Arc<dyn PlatformPort>, String>;
}

/// `inject_message` into a chat the gateway serves.
pub trait ChatInjector: Send + Sync {
    /// Start a turn with `content` in the chat of `session_key` (the chat
    /// that spoke last when `None`); `false` when there is no such chat.
    fn inject(&self, session_key: Option<&str>, content: &str) -> bool;
}

/// A platform's state, as `/healthz` and the logs show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlatformState {
    Connecting,
    Connected,
    /// Waiting to connect again after a failure (attempt counts from 1).
    Reconnecting {
        attempt: u32,
        error: String,
    },
    /// Failed for good (the adapter said retrying cannot help).
    Failed(String),
    Disabled(String),
    Unavailable(String),
    Stopped,
}

impl std::fmt::Display for PlatformState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlatformState::Connecting => write!(f, "connecting"),
            PlatformState::Connected => write!(f, "connected"),
            PlatformState::Reconnecting { attempt, error } => {
                write!(f, "reconnecting (attempt {attempt}): {error}")
            }
            PlatformState::Failed(e) => write!(f, "failed: {e}"),
            PlatformState::Disabled(why) => write!(f, "disabled: {why}"),
            PlatformState::Unavailable(why) => write!(f, "unavailable: {why}"),
            PlatformState::Stopped => write!(f, "stopped"),
        }
    }
}

/// The host's registered platforms, their states and the gateway's injector.
#[derive(Default)]
pub struct PlatformTable {
    /// Plugin key → the platforms it registered (replaced when it loads again).
    by_plugin: Mutex<BTreeMap<String, Vec<Arc<dyn PlatformFactory>>>>,
    states: Mutex<BTreeMap<String, PlatformState>>,
    injector: RwLock<Option<Arc<dyn ChatInjector>>>,
    /// (plugin, platform) → the inlet of an adapter running in a worker.
    inlets: Mutex<std::collections::HashMap<(String, String), Inlet>>,
    /// Platform → its connected adapter, while the gateway runs it.
    ports: Mutex<std::collections::HashMap<String, Arc<dyn PlatformPort>>>,
}

impl PlatformTable {
    /// The platforms `plugin` registered in its latest load.
    pub fn set_plugin(&self, plugin: &str, platforms: Vec<Arc<dyn PlatformFactory>>) {
        let mut map = self.by_plugin.lock().unwrap_or_else(|e| e.into_inner());
        if platforms.is_empty() {
            map.remove(plugin);
        } else {
            map.insert(plugin.to_string(), platforms);
        }
    }

    /// Every registered platform, by plugin then registration order.
    pub fn all(&self) -> Vec<Arc<dyn PlatformFactory>> {
        let map = self.by_plugin.lock().unwrap_or_else(|e| e.into_inner());
        map.values().flatten().cloned().collect()
    }

    /// The platforms `plugin` registered.
    pub fn of_plugin(&self, plugin: &str) -> Vec<Arc<dyn PlatformFactory>> {
        let map = self.by_plugin.lock().unwrap_or_else(|e| e.into_inner());
        map.get(plugin).cloned().unwrap_or_default()
    }

    pub fn set_state(&self, platform: &str, state: PlatformState) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.insert(platform.to_string(), state);
    }

    /// Each platform's state, by name.
    pub fn states(&self) -> Vec<(String, PlatformState)> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn set_injector(&self, injector: Option<Arc<dyn ChatInjector>>) {
        *self.injector.write().unwrap_or_else(|e| e.into_inner()) = injector;
    }

    /// Where the signals of plugin `plugin`'s platform `platform` go while
    /// its adapter runs in the plugin's worker (the inlet it was made with).
    pub fn set_inlet(&self, plugin: &str, platform: &str, inlet: Inlet) {
        let mut inlets = self.inlets.lock().unwrap_or_else(|e| e.into_inner());
        inlets.insert((plugin.to_string(), platform.to_string()), inlet);
    }

    /// Hand `signal` of a worker's adapter to its gateway; `false` when no
    /// gateway waits for it (none made it, or it stopped).
    pub fn signal(&self, plugin: &str, platform: &str, signal: PortSignal) -> bool {
        let inlets = self.inlets.lock().unwrap_or_else(|e| e.into_inner());
        inlets
            .get(&(plugin.to_string(), platform.to_string()))
            .is_some_and(|inlet| inlet.send(signal).is_ok())
    }

    /// Platform `platform`'s adapter is connected (`Some`), or no longer.
    pub fn set_port(&self, platform: &str, port: Option<Arc<dyn PlatformPort>>) {
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        match port {
            Some(port) => ports.insert(platform.to_string(), port),
            None => ports.remove(platform),
        };
    }

    /// Platform `platform`'s connected adapter.
    pub fn port(&self, platform: &str) -> Option<Arc<dyn PlatformPort>> {
        let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        ports.get(platform).cloned()
    }

    /// Whether a plugin registered platform `platform`.
    pub fn is_registered(&self, platform: &str) -> bool {
        self.all().iter().any(|f| f.name() == platform)
    }

    pub fn injector(&self) -> Option<Arc<dyn ChatInjector>> {
        self.injector
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
