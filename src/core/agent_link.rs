//! What plugins reach of the agent that runs their host, without the
//! plugin layers depending on the agent: the agent gives its host an
//! [`AgentLink`] (its model and the host's tool pipeline), and every
//! session has an inbox of messages plugins injected into its conversation
//! ([`Injected`]). Both live in the host's [`Extensions`](super::extensions::Extensions).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Map, Value};

use super::hooks::BoxFuture;
use super::outcome::ToolResult;

/// A model call a plugin asks for: its own conversation, no tools offered.
#[derive(Clone, Debug, Default)]
pub struct LinkRequest {
    pub messages: Vec<Value>,
    /// Merged into the request (`temperature`, `max_tokens`, …).
    pub params: Map<String, Value>,
    /// The conversation it is billed to (never an agent session).
    pub session_key: String,
}

/// What the model answered.
#[derive(Clone, Debug, Default)]
pub struct LinkCompletion {
    pub text: String,
    pub model: String,
    pub usage: Map<String, Value>,
}

/// The agent's side of what plugins reach: implemented by the agent loop,
/// handed to the host when the agent is made.
pub trait AgentLink: Send + Sync + 'static {
    /// The agent's model name.
    fn model(&self) -> String;
    /// Ask the agent's model.
    fn complete(&self, request: LinkRequest) -> BoxFuture<Result<LinkCompletion, String>>;
    /// Run `name` with `args` through the host's whole tool pipeline.
    /// `None` when the host is gone.
    fn dispatch_tool(
        &self,
        name: String,
        args: Value,
        task_id: String,
    ) -> BoxFuture<Option<ToolResult>>;
}

/// The agent a host runs under, if any (the latest made wins).
#[derive(Default)]
pub struct AgentSlot(RwLock<Option<Arc<dyn AgentLink>>>);

impl AgentSlot {
    pub fn set(&self, link: Arc<dyn AgentLink>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(link);
    }

    pub fn get(&self) -> Option<Arc<dyn AgentLink>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Messages plugins injected, per session key, oldest first; a turn of
/// that session takes them at its next model iteration.
#[derive(Default)]
pub struct Injected(Mutex<HashMap<String, Vec<String>>>);

impl Injected {
    /// Queue `message` for the conversation of `session`.
    pub fn push(&self, session: &str, message: String) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(session.to_string())
            .or_default()
            .push(message);
    }

    /// What was queued for `session` since the last call, oldest first.
    pub fn take(&self, session: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session)
            .unwrap_or_default()
    }
}
