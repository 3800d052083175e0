//! What the loop is configured with, what it shows while a turn runs, and
//! what it reports when a turn ends (`plughost run --json`'s document).

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::core::hooks::{EndedBy, HookErrorRecord};
use crate::core::outcome::ToolOutcome;

/// How the loop behaves.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub system_prompt: String,
    /// Model iterations per turn before the loop gives up (default 25).
    pub max_iterations: usize,
    /// A tool call running longer is cancelled (async) or abandoned (sync).
    pub tool_timeout: Duration,
    /// Messages `/compact` keeps.
    pub compact_keep: usize,
    /// Tools a `delegate` sub-agent gets when the call names none.
    pub subagent_tools: Vec<String>,
    /// How long a turn waits for another process's turn on the same session
    /// to end before it is refused (default 30 s).
    pub session_wait: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            system_prompt:
                "You are a helpful agent. Use the tools when they help; keep answers short.".into(),
            max_iterations: 25,
            tool_timeout: Duration::from_secs(120),
            compact_keep: 8,
            subagent_tools: ["read_file", "write_file", "edit_file", "list_dir", "exec"]
                .map(String::from)
                .to_vec(),
            session_wait: Duration::from_secs(30),
        }
    }
}

/// What happens during a turn, for a live display.
#[derive(Clone, Debug)]
pub enum AgentEvent {
    TextDelta(String),
    /// A model call of the turn begins (only from a provider that marks
    /// iterations: see [`super::provider::StreamEvent::IterationStart`]).
    IterationStart,
    ToolStarted {
        id: String,
        name: String,
        arguments: String,
    },
    ToolFinished {
        id: String,
        name: String,
        result: String,
        outcome: ToolOutcome,
    },
}

/// One tool call of a turn. In JSON, `outcome` is its kind (`ok`,
/// `raised`, `blocked`, …) and `details` the particulars: a plugin failure
/// with its type, message and traceback, a block's message, what is wrong
/// with the arguments.
#[derive(Clone, Debug)]
pub struct ToolCallRecord {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    pub result: String,
    pub outcome: ToolOutcome,
    pub duration_ms: f64,
}

impl Serialize for ToolCallRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ToolCallRecord", 7)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("arguments", &self.arguments)?;
        st.serialize_field("result", &self.result)?;
        st.serialize_field("outcome", &self.outcome)?;
        st.serialize_field("details", &self.outcome.details())?;
        st.serialize_field("duration_ms", &self.duration_ms)?;
        st.end()
    }
}

/// Where a turn's time went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    pub total_ms: f64,
    pub model_ms: f64,
    pub tools_ms: f64,
}

/// One provider call as the report keeps it; serialised as `{iteration,
/// model, params, messages, tools}`. Its messages are the request's own,
/// shared: a long session's transcript is not copied for the report.
#[derive(Clone, Debug, Default)]
pub struct ModelCall {
    pub iteration: usize,
    pub model: String,
    pub params: Map<String, Value>,
    /// The system prompt's message, when the call had one.
    pub system: Option<Value>,
    /// The messages after it, as the call's list was when it was sent.
    pub messages: std::sync::Arc<Vec<Value>>,
    /// The names of the tools offered.
    pub tools: Value,
}

impl ModelCall {
    /// The messages as the call sent them, the system prompt first.
    pub fn sent_messages(&self) -> Vec<Value> {
        self.system
            .iter()
            .chain(self.messages.iter())
            .cloned()
            .collect()
    }
}

impl Serialize for ModelCall {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        /// The system prompt's message, then the others.
        struct Sent<'a>(&'a ModelCall);
        impl Serialize for Sent<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.system.iter().chain(self.0.messages.iter()))
            }
        }
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("iteration", &self.iteration)?;
        map.serialize_entry("model", &self.model)?;
        map.serialize_entry("params", &self.params)?;
        map.serialize_entry("messages", &Sent(self))?;
        map.serialize_entry("tools", &self.tools)?;
        map.end()
    }
}

/// Everything about one turn (`plughost run --json` prints it).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TurnReport {
    pub session_key: String,
    pub input: String,
    /// The reply to show (None: skipped, or a command with no reply).
    pub reply: Option<String>,
    /// Why `pre_gateway_dispatch` dropped the message.
    pub skipped: Option<String>,
    /// The message was a slash command.
    pub command: bool,
    pub iterations: usize,
    pub tool_calls: Vec<ToolCallRecord>,
    /// Messages appended to the transcript this turn.
    pub messages: Vec<Value>,
    pub usage: Map<String, Value>,
    pub timings: Timings,
    pub completed: bool,
    pub interrupted: bool,
    /// The turn ended at the iteration cap without a final answer.
    pub hit_iteration_cap: bool,
    pub error: Option<String>,
    /// What each provider call was sent, after every hook, in order:
    /// `{iteration, model, params, messages, tools}` (OpenAI messages,
    /// system prompt first; tool names).
    pub model_calls: Vec<ModelCall>,
    /// Every hook call of this turn that failed.
    pub hook_errors: Vec<HookErrorRecord>,
    /// The `abort_turn` reason, when a plugin aborted the turn.
    pub aborted: Option<String>,
    /// How the turn ended: `answer`, `short_circuit`, `aborted`,
    /// `tool_terminate`, `iteration_cap`, `skipped`, `command`, `error`,
    /// `interrupted`.
    pub ended_by: EndedBy,
    /// UI events plugins emitted (Codumentor's `ui_event_emitter`).
    pub ui_events: Vec<Value>,
}

/// An inbound message.
#[derive(Clone, Debug, Default)]
pub struct Inbound {
    pub content: String,
    pub channel: String,
    pub sender_id: String,
    pub session_key: String,
    pub metadata: Map<String, Value>,
}

impl Inbound {
    pub fn new(session_key: &str, content: &str) -> Inbound {
        Inbound {
            content: content.into(),
            channel: "cli".into(),
            sender_id: "user".into(),
            session_key: session_key.into(),
            ..Default::default()
        }
    }
}
