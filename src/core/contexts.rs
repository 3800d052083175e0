//! What a callback is shown: the per-family contexts, the loop point's
//! context, and the turn a point fires in.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::core::points::HookEvent;

/// Per-call state a dialect attaches to a context (the Python objects it
/// built for the first hook, say), so later hooks and the handler reuse it.
pub trait CallState: std::any::Any + Send {
    /// Itself, for downcasting to the dialect's own type.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
    /// The call's arguments as the dialect's hooks left them, when they may
    /// have been edited in place (a Flowly `tool_guard` hook editing
    /// `ctx.params`): dispatch hands them to handlers that read the Rust
    /// arguments (native and built-in tools). `None`: unchanged.
    fn edited_params(&mut self) -> Option<Map<String, Value>> {
        None
    }
}

/// The slot on a context that holds a dialect's [`CallState`].
#[derive(Default)]
pub struct DialectState(Option<Box<dyn CallState>>);

impl DialectState {
    /// The attached state, if it is of type `T`.
    pub fn get_mut<T: CallState>(&mut self) -> Option<&mut T> {
        self.0
            .as_mut()
            .and_then(|b| b.as_any_mut().downcast_mut::<T>())
    }
    /// Attach `value`, replacing what was there.
    pub fn set<T: CallState>(&mut self, value: T) {
        self.0 = Some(Box::new(value));
    }
    /// See [`CallState::edited_params`].
    pub fn edited_params(&mut self) -> Option<Map<String, Value>> {
        self.0.as_mut().and_then(|s| s.edited_params())
    }
}

/// A copy of a context carries no dialect state: the cache (Python objects
/// built for one context) belongs to the context it was made for, so a
/// copy made to hand a call to another thread starts empty and the
/// dialect rebuilds what it needs. See `host::load`'s hand-off.
impl Clone for DialectState {
    fn clone(&self) -> Self {
        DialectState(None)
    }
}

impl fmt::Debug for DialectState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "DialectState(set)"
        } else {
            "DialectState(empty)"
        })
    }
}

/// Context of the tool events (`tool_guard`, `tool_done`,
/// `result_rewrite`, `exec_output_rewrite`).
#[derive(Clone, Debug, Default)]
pub struct ToolCallContext {
    pub session_id: String,
    pub task_id: String,
    pub tool_name: String,
    pub params: Map<String, Value>,
    pub tool_call_id: String,
    pub result: Option<String>,
    pub duration_ms: f64,
    pub success: Option<bool>,
    /// Which event the context was last prepared for.
    pub stage: Option<HookEvent>,
    /// Bumped whenever `result`, `duration_ms` or `success` change within
    /// a stage (a chained transform), so dialects refresh what they show.
    pub revision: u64,
    pub dialect: DialectState,
    /// The call runs inside a `delegate` sub-agent (Felix's `manifest_id`).
    pub delegate: bool,
}

/// Context of the model events (`prompt_context`, `exchange_done`,
/// `request_sending`, `response_arrived`).
#[derive(Clone, Debug, Default)]
pub struct LlmCallContext {
    pub session_id: String,
    pub task_id: String,
    pub model: String,
    pub messages: Vec<Value>,
    pub tools: Vec<Value>,
    pub system: String,
    pub user_message: String,
    pub response: Value,
    pub assistant_message: String,
    pub usage: Map<String, Value>,
    pub truncated: bool,
    pub interrupted: bool,
    pub stage: Option<HookEvent>,
    pub dialect: DialectState,
}

/// Context of the session events.
#[derive(Clone, Debug, Default)]
pub struct SessionContext {
    pub session_id: String,
    pub task_id: String,
    pub model: String,
    pub platform: String,
    pub completed: bool,
    pub interrupted: bool,
    pub stage: Option<HookEvent>,
    pub dialect: DialectState,
}

/// Context of `subagent_begun` and `subagent_done`.
#[derive(Clone, Debug, Default)]
pub struct SubagentStopContext {
    pub session_id: String,
    pub task_id: String,
    pub subagent_id: String,
    pub reason: String,
    /// The task the sub-agent was given.
    pub goal: String,
    pub stage: Option<HookEvent>,
    pub dialect: DialectState,
}

/// An inbound message as `inbound_gate` sees it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InboundMessage {
    pub content: String,
    pub channel: String,
    pub sender_id: String,
    pub session_key: String,
    pub metadata: Map<String, Value>,
}

/// Context of `inbound_gate`.
#[derive(Clone, Debug, Default)]
pub struct GatewayContext {
    pub session_id: String,
    pub task_id: String,
    pub event: InboundMessage,
    /// The channel name.
    pub gateway: String,
    pub stage: Option<HookEvent>,
    pub dialect: DialectState,
}

/// A tool call as the loop points show it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct LoopToolCall {
    pub id: String,
    pub name: String,
    /// The parsed arguments (an object).
    pub arguments: Value,
}

/// Context of every loop point ([`HookEvent::LOOP_POINTS`]). Which fields
/// are filled depends on the point (each field says where); chain points
/// take callbacks' edits of the fields they name, in place.
///
/// Its serde form is its plain fields, as a worker of an isolated plugin
/// gets them (the isolation protocol's `LoopWire` carries it): the turn,
/// the stage and the dialect's state stay behind.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct LoopContext {
    pub session_id: String,
    /// The turn runs in a `delegate` sub-agent.
    pub delegate: bool,
    /// The model iteration (1-based) of model and tool points; 0 before the first.
    pub iteration: usize,
    /// The model the provider call uses (P5–P8); editable at P7.
    pub model: String,
    /// Extra request parameters of this call (P7); editable at P7.
    pub params: Map<String, Value>,
    /// OpenAI-format messages, system prompt first: the in-flight list at
    /// P4/P5 (editable, carried), this call's list at P6 (editable, this
    /// call only) and P7–P8, the dropped messages at P2c.
    pub messages: Vec<Value>,
    /// P2c: the messages compaction keeps.
    pub kept: Vec<Value>,
    /// The tool definitions offered (P5–P7), OpenAI format.
    pub tools: Vec<Value>,
    /// P1: the inbound text (editable); P4: the turn's message (shown, not
    /// edited); P11: the answer (editable); P12, P13a: the answer stored.
    pub text: String,
    /// P8: the assistant message (OpenAI format, editable: what the loop
    /// records and acts on, tool calls included); P11/P12: the final one.
    pub reply: Value,
    /// P8: `stop`, `tool_calls`, `length` or `unknown` (the provider's finish reason).
    pub stop_reason: String,
    /// P8: this call's usage.
    pub usage: Map<String, Value>,
    /// P9–P10: the call.
    pub tool_call: LoopToolCall,
    /// P10: the result text the model would see (editable on the chain lane).
    pub result: String,
    /// P10: the call failed (raised, refused, timed out).
    pub is_error: bool,
    /// P10: how long the handler ran.
    pub duration_ms: f64,
    /// P2c/P7e/P13e: what failed.
    pub error: Option<String>,
    /// P13: the report's `ended_by`.
    pub ended_by: EndedBy,
    /// P13a: the abort reason.
    pub reason: Option<String>,
    /// P0: the keys of the plugins that contributed tools or hooks.
    pub plugins: Vec<String>,
    /// The answer point: how many times this turn was already continued
    /// there (0 at the first answer).
    #[serde(default)]
    pub attempt: usize,
    /// The answer point: the workspace files the turn's built-in tools
    /// wrote or edited, sorted, each once.
    #[serde(default)]
    pub changed_paths: Vec<String>,
    /// The turn this point fires in (absent for a tool called outside a turn).
    #[serde(skip)]
    pub turn: Option<Arc<TurnScope>>,
    #[serde(skip)]
    pub stage: Option<HookEvent>,
    #[serde(skip)]
    pub dialect: DialectState,
}

/// How often one model call is retried on [`LoopDecision::RetryModelCall`](crate::core::decisions::LoopDecision::RetryModelCall).
pub const MAX_MODEL_RETRIES: usize = 3;

/// How often one turn is continued at the answer point
/// ([`LoopDecision::ContinueTurn`](crate::core::decisions::LoopDecision::ContinueTurn)):
/// Hermes's default `agent.max_verify_nudges`, so a hook that always asks
/// for more cannot keep a turn going forever.
pub const MAX_ANSWER_CONTINUATIONS: usize = 3;

/// A hook call of this turn that failed, as `run --json` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HookErrorRecord {
    pub plugin: String,
    /// The plugin's dialect (filled from the host's records when the turn ends).
    pub dialect: String,
    /// The dialect's own name of the event (as its plugins spell it).
    pub event: String,
    /// `module.qualname` of the callback.
    pub handler: String,
    /// `<ExceptionType>: <message>`, the timeout text, or a wrong-shape sentence.
    pub error: String,
}

/// Typed state by dialect name: one value per name, made the first time.
#[derive(Default)]
pub struct Slots {
    map: std::sync::Mutex<HashMap<&'static str, Arc<dyn std::any::Any + Send + Sync>>>,
}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Slots")
    }
}

impl Slots {
    /// The state of dialect `name`, made by `init` the first time; `None`
    /// when `name` holds a value of another type.
    pub fn slot<T: std::any::Any + Send + Sync>(
        &self,
        name: &'static str,
        init: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(name).or_insert_with(|| Arc::new(init()));
        entry.clone().downcast::<T>().ok()
    }
}

/// What one turn shares across its points and the dialects' callbacks:
/// the hook errors it collects, Codumentor's UI events, one slot per
/// dialect for per-turn state (a dialect's shared `ctx`), and the slots of
/// the session the turn runs on (per-session state, owned by whoever holds
/// the session: dropped with it, never a `static`).
#[derive(Default)]
pub struct TurnScope {
    pub hook_errors: std::sync::Mutex<Vec<HookErrorRecord>>,
    pub ui_events: std::sync::Mutex<Vec<Value>>,
    slots: Slots,
    session: std::sync::OnceLock<Arc<Slots>>,
}

impl fmt::Debug for TurnScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TurnScope")
    }
}

impl TurnScope {
    /// The per-turn state of dialect `name`, made by `init` the first time.
    pub fn slot<T: std::any::Any + Send + Sync>(
        &self,
        name: &'static str,
        init: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        self.slots.slot(name, init)
    }

    /// Tie the turn to its session's slots (once; a later call is ignored).
    pub fn attach_session(&self, slots: Arc<Slots>) {
        let _ = self.session.set(slots);
    }

    /// The slots of the session the turn runs on, once it owns it (an
    /// isolated plugin's proxy hands their stored state to its worker).
    pub fn session(&self) -> Option<&Arc<Slots>> {
        self.session.get()
    }

    /// The per-session state of dialect `name`; `None` before the turn
    /// owns its session (or for a tool called outside any turn).
    pub fn session_slot<T: std::any::Any + Send + Sync>(
        &self,
        name: &'static str,
        init: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        self.session.get()?.slot(name, init)
    }
}

tokio::task_local! {
    /// The turn the current task works for (hook errors land in it).
    pub static CURRENT_TURN: Arc<TurnScope>;
}

/// The turn the current task works for, if any.
pub fn current_turn() -> Option<Arc<TurnScope>> {
    CURRENT_TURN.try_with(|t| t.clone()).ok()
}

/// How a turn ended: the report's and [`LoopContext::ended_by`]'s value.
/// Serialises to the strings `run --json` has always printed (`answer`,
/// `short_circuit`, …), so decisions are made on the variant and the
/// document stays as it was. [`EndedBy::NotEnded`] (`""`) is a context
/// shown before the turn ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    #[default]
    #[serde(rename = "")]
    NotEnded,
    Answer,
    ShortCircuit,
    Aborted,
    ToolTerminate,
    IterationCap,
    Skipped,
    Command,
    Error,
    Interrupted,
}

impl EndedBy {
    /// Every value, in the order the report documents them.
    pub const ALL: [EndedBy; 10] = [
        EndedBy::NotEnded,
        EndedBy::Answer,
        EndedBy::ShortCircuit,
        EndedBy::Aborted,
        EndedBy::ToolTerminate,
        EndedBy::IterationCap,
        EndedBy::Skipped,
        EndedBy::Command,
        EndedBy::Error,
        EndedBy::Interrupted,
    ];

    /// The wire string (`aborted`).
    pub fn as_str(self) -> &'static str {
        match self {
            EndedBy::NotEnded => "",
            EndedBy::Answer => "answer",
            EndedBy::ShortCircuit => "short_circuit",
            EndedBy::Aborted => "aborted",
            EndedBy::ToolTerminate => "tool_terminate",
            EndedBy::IterationCap => "iteration_cap",
            EndedBy::Skipped => "skipped",
            EndedBy::Command => "command",
            EndedBy::Error => "error",
            EndedBy::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for EndedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The value of a wire string; a string no turn ends by is
/// [`EndedBy::NotEnded`]. For fixtures that name the value as text.
impl From<&str> for EndedBy {
    fn from(s: &str) -> EndedBy {
        EndedBy::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .unwrap_or_default()
    }
}
