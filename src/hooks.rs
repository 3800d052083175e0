//! The hook bus: event names, per-event contexts, actions, and callbacks.
//!
//! Plain Rust, no Python: a dialect (see `crate::dialects`) adapts its own
//! callbacks to [`HookCallback`], and a Rust service can register native
//! closures beside them.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::outcome::PluginError;

/// A boxed, sendable future: what a callback that must wait hands back.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The lifecycle events of the hook bus: Flowly's fourteen, then the
/// Hermes events plughost's loop can fire (`transform_llm_output`,
/// `subagent_start`, `api_request_error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    PreToolCall,
    PostToolCall,
    TransformToolResult,
    TransformTerminalOutput,
    PreLlmCall,
    PostLlmCall,
    PreApiRequest,
    PostApiRequest,
    OnSessionStart,
    OnSessionEnd,
    OnSessionFinalize,
    OnSessionReset,
    SubagentStop,
    PreGatewayDispatch,
    TransformLlmOutput,
    SubagentStart,
    ApiRequestError,
}

impl HookEvent {
    /// Every event, in the order the seed lists them.
    pub const ALL: [HookEvent; 17] = [
        HookEvent::PreToolCall,
        HookEvent::PostToolCall,
        HookEvent::TransformToolResult,
        HookEvent::TransformTerminalOutput,
        HookEvent::PreLlmCall,
        HookEvent::PostLlmCall,
        HookEvent::PreApiRequest,
        HookEvent::PostApiRequest,
        HookEvent::OnSessionStart,
        HookEvent::OnSessionEnd,
        HookEvent::OnSessionFinalize,
        HookEvent::OnSessionReset,
        HookEvent::SubagentStop,
        HookEvent::PreGatewayDispatch,
        HookEvent::TransformLlmOutput,
        HookEvent::SubagentStart,
        HookEvent::ApiRequestError,
    ];

    /// The wire name plugins use (`pre_tool_call`, ...).
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolCall => "pre_tool_call",
            HookEvent::PostToolCall => "post_tool_call",
            HookEvent::TransformToolResult => "transform_tool_result",
            HookEvent::TransformTerminalOutput => "transform_terminal_output",
            HookEvent::PreLlmCall => "pre_llm_call",
            HookEvent::PostLlmCall => "post_llm_call",
            HookEvent::PreApiRequest => "pre_api_request",
            HookEvent::PostApiRequest => "post_api_request",
            HookEvent::OnSessionStart => "on_session_start",
            HookEvent::OnSessionEnd => "on_session_end",
            HookEvent::OnSessionFinalize => "on_session_finalize",
            HookEvent::OnSessionReset => "on_session_reset",
            HookEvent::SubagentStop => "subagent_stop",
            HookEvent::PreGatewayDispatch => "pre_gateway_dispatch",
            HookEvent::TransformLlmOutput => "transform_llm_output",
            HookEvent::SubagentStart => "subagent_start",
            HookEvent::ApiRequestError => "api_request_error",
        }
    }

    /// Parse a wire name; `None` for names the bus does not know.
    pub fn from_name(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an event combines the answers of its callbacks (pluggy's
/// `firstresult` and friends, as data). Every callback runs in every
/// policy; the policy only decides which answers count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Answers are not used (an observer event).
    Observe,
    /// The first accepted answer wins; the rest are ignored.
    FirstWins,
    /// Each replacement becomes the value the next callback sees.
    Chain,
    /// Every accepted answer is kept, in order.
    Collect,
}

/// The kinds of [`HookAction`], for the accepted-answers table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    Block,
    Skip,
    Rewrite,
    Replace,
    Inject,
}

/// What a callback that fails does to the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// The failure is logged and counted; the event goes on (every Flowly event).
    Open,
    /// The failure counts as the event's refusal (a guard that cannot
    /// decide blocks): a failing `pre_tool_call` callback blocks the call.
    Closed,
}

/// One row of the hook specification table.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct HookSpec {
    pub event: HookEvent,
    pub policy: Policy,
    /// Answers the event honours; any other is a wrong shape.
    pub accepts: &'static [ActionKind],
    pub on_error: FailMode,
}

const fn spec(event: HookEvent, policy: Policy, accepts: &'static [ActionKind]) -> HookSpec {
    HookSpec {
        event,
        policy,
        accepts,
        on_error: FailMode::Open,
    }
}

/// The specification of every event, in [`HookEvent::ALL`] order.
pub const HOOK_SPECS: [HookSpec; 17] = [
    spec(
        HookEvent::PreToolCall,
        Policy::FirstWins,
        &[ActionKind::Block],
    ),
    spec(HookEvent::PostToolCall, Policy::Observe, &[]),
    spec(
        HookEvent::TransformToolResult,
        Policy::FirstWins,
        &[ActionKind::Replace],
    ),
    spec(
        HookEvent::TransformTerminalOutput,
        Policy::FirstWins,
        &[ActionKind::Replace],
    ),
    spec(
        HookEvent::PreLlmCall,
        Policy::Collect,
        &[ActionKind::Inject],
    ),
    spec(HookEvent::PostLlmCall, Policy::Observe, &[]),
    spec(HookEvent::PreApiRequest, Policy::Observe, &[]),
    spec(HookEvent::PostApiRequest, Policy::Observe, &[]),
    spec(HookEvent::OnSessionStart, Policy::Observe, &[]),
    spec(HookEvent::OnSessionEnd, Policy::Observe, &[]),
    spec(HookEvent::OnSessionFinalize, Policy::Observe, &[]),
    spec(HookEvent::OnSessionReset, Policy::Observe, &[]),
    spec(HookEvent::SubagentStop, Policy::Observe, &[]),
    spec(
        HookEvent::PreGatewayDispatch,
        Policy::FirstWins,
        &[ActionKind::Skip, ActionKind::Rewrite],
    ),
    spec(
        HookEvent::TransformLlmOutput,
        Policy::FirstWins,
        &[ActionKind::Replace],
    ),
    spec(HookEvent::SubagentStart, Policy::Observe, &[]),
    spec(HookEvent::ApiRequestError, Policy::Observe, &[]),
];

impl HookEvent {
    /// This event's row of [`HOOK_SPECS`].
    #[inline]
    pub fn spec(self) -> &'static HookSpec {
        &HOOK_SPECS[self.index()]
    }
}

/// Per-call state a dialect attaches to a context (the Python objects it
/// built for the first hook, say), so later hooks and the handler reuse it.
pub trait CallState: std::any::Any + Send {
    /// Itself, for downcasting to the dialect's own type.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
    /// The call's arguments as the dialect's hooks left them, when they may
    /// have been edited in place (a Flowly `pre_tool_call` hook editing
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

impl fmt::Debug for DialectState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "DialectState(set)"
        } else {
            "DialectState(empty)"
        })
    }
}

/// Context of the tool events (`pre_tool_call`, `post_tool_call`,
/// `transform_tool_result`, `transform_terminal_output`).
#[derive(Debug, Default)]
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
}

/// Context of the model events (`pre_llm_call`, `post_llm_call`,
/// `pre_api_request`, `post_api_request`).
#[derive(Debug, Default)]
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
#[derive(Debug, Default)]
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

/// Context of `subagent_start` and `subagent_stop`.
#[derive(Debug, Default)]
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

/// An inbound message as `pre_gateway_dispatch` sees it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InboundMessage {
    pub content: String,
    pub channel: String,
    pub sender_id: String,
    pub session_key: String,
    pub metadata: Map<String, Value>,
}

/// Context of `pre_gateway_dispatch`.
#[derive(Debug, Default)]
pub struct GatewayContext {
    pub session_id: String,
    pub task_id: String,
    pub event: InboundMessage,
    /// The channel name.
    pub gateway: String,
    pub stage: Option<HookEvent>,
    pub dialect: DialectState,
}

/// The context handed to a callback, by event family.
#[derive(Debug)]
pub enum HookPayload<'a> {
    Tool(&'a mut ToolCallContext),
    Llm(&'a mut LlmCallContext),
    Session(&'a mut SessionContext),
    Subagent(&'a mut SubagentStopContext),
    Gateway(&'a mut GatewayContext),
}

impl HookPayload<'_> {
    /// Reborrow for one callback while keeping the payload for the next.
    pub fn reborrow(&mut self) -> HookPayload<'_> {
        match self {
            HookPayload::Tool(c) => HookPayload::Tool(c),
            HookPayload::Llm(c) => HookPayload::Llm(c),
            HookPayload::Session(c) => HookPayload::Session(c),
            HookPayload::Subagent(c) => HookPayload::Subagent(c),
            HookPayload::Gateway(c) => HookPayload::Gateway(c),
        }
    }

    /// Record the event the payload is about to be shown to.
    pub(crate) fn set_stage(&mut self, event: HookEvent) {
        let stage = match self {
            HookPayload::Tool(c) => &mut c.stage,
            HookPayload::Llm(c) => &mut c.stage,
            HookPayload::Session(c) => &mut c.stage,
            HookPayload::Subagent(c) => &mut c.stage,
            HookPayload::Gateway(c) => &mut c.stage,
        };
        *stage = Some(event);
    }
}

/// What a callback asks of the runtime; each event honours only its own kinds
/// (its row of [`HOOK_SPECS`]); any other answer is counted as a wrong
/// shape and ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookAction {
    /// Nothing to do (observe only).
    Continue,
    /// `pre_tool_call`: abort the call with this message.
    Block(String),
    /// `pre_gateway_dispatch`: drop the inbound message.
    Skip(String),
    /// `pre_gateway_dispatch`: replace the inbound text.
    Rewrite(String),
    /// `transform_*`: replace the output with this text.
    Replace(String),
    /// `pre_llm_call`: inject this context into the user message.
    Inject(String),
}

impl HookAction {
    /// The action's kind; `None` for `Continue`.
    pub fn kind(&self) -> Option<ActionKind> {
        Some(match self {
            HookAction::Continue => return None,
            HookAction::Block(_) => ActionKind::Block,
            HookAction::Skip(_) => ActionKind::Skip,
            HookAction::Rewrite(_) => ActionKind::Rewrite,
            HookAction::Replace(_) => ActionKind::Replace,
            HookAction::Inject(_) => ActionKind::Inject,
        })
    }
}

/// Why a callback's answer was not used; logged and counted per callback,
/// never propagated.
#[derive(Clone, Debug, thiserror::Error)]
pub enum HookError {
    /// The callback raised.
    #[error("{0}")]
    Raised(PluginError),
    /// The callback answered something the event does not accept.
    #[error("answered {0}, which {1} does not accept; the answer is ignored")]
    WrongShape(String, HookEvent),
    /// An async callback ran past its budget and was cancelled.
    #[error("timed out after {} s and was skipped", .0.as_secs_f64())]
    TimedOut(Duration),
    /// A sync callback ran past its budget; its answer is ignored.
    #[error("took longer than its {} s budget; its answer is ignored", .0.as_secs_f64())]
    Overran(Duration),
    /// The callback could not run (the interpreter is shutting down).
    #[error("could not run: {0}")]
    NotRun(String),
}

impl HookError {
    /// A failure with just a message (native callbacks).
    pub fn raised(message: impl Into<String>) -> HookError {
        HookError::Raised(PluginError::native(message))
    }
}

/// A callback's answer: ready now, or a future to await (async Python hooks).
pub enum HookReturn {
    Ready(Result<HookAction, HookError>),
    Pending(BoxFuture<Result<HookAction, HookError>>),
}

/// A hook callback. Called with the event and its context.
pub trait HookCallback: Send + Sync + 'static {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn;
    /// The refusal this callback stands for when it fails on `event`, if it
    /// fails closed whatever the event's own [`FailMode`] (a dialect whose
    /// guards fail closed, as Hermes's `pre_tool_call` ones do, with its own
    /// message). `None`: the event's rule applies.
    fn fail_closed(&self, event: HookEvent, error: &HookError) -> Option<HookAction> {
        let _ = (event, error);
        None
    }
}

impl<F> HookCallback for F
where
    F: Fn(HookEvent, HookPayload<'_>) -> HookAction + Send + Sync + 'static,
{
    #[inline]
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        HookReturn::Ready(Ok(self(event, payload)))
    }
}

/// Counters of one registered callback, for `plugins doctor` and tests.
#[derive(Debug, Default)]
pub struct HookStats {
    pub calls: AtomicU64,
    /// Every answer not used: raised, wrong shape, timed out.
    pub errors: AtomicU64,
    /// Of those, answers of a shape the event does not accept.
    pub wrong_shape: AtomicU64,
    /// Of those, callbacks past their time budget.
    pub timeouts: AtomicU64,
}

impl HookStats {
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
    pub fn wrong_shape(&self) -> u64 {
        self.wrong_shape.load(Ordering::Relaxed)
    }
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }
    /// Count one failed answer; `true` the first time this kind is seen,
    /// so the caller logs loudly once and quietly after.
    pub fn count(&self, error: &HookError) -> bool {
        self.errors.fetch_add(1, Ordering::Relaxed);
        match error {
            HookError::WrongShape(..) => self.wrong_shape.fetch_add(1, Ordering::Relaxed) == 0,
            HookError::TimedOut(_) | HookError::Overran(_) => {
                self.timeouts.fetch_add(1, Ordering::Relaxed) == 0
            }
            _ => true,
        }
    }
}

/// One subscription on the bus.
#[derive(Clone)]
pub struct HookEntry {
    /// The plugin key (or `"native"` / `"core"`) that registered it.
    pub owner: String,
    /// A readable name of the callback, for logs.
    pub label: String,
    /// Lower runs first; equal priorities keep registration order.
    pub priority: i32,
    pub callback: Arc<dyn HookCallback>,
    pub stats: Arc<HookStats>,
}

impl fmt::Debug for HookEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookEntry")
            .field("owner", &self.owner)
            .field("label", &self.label)
            .field("priority", &self.priority)
            .finish()
    }
}

/// Subscriptions by event, ordered by (priority, registration order).
#[derive(Debug, Default, Clone)]
pub struct HookBus {
    by_event: [Vec<HookEntry>; 17],
    /// Names no event matches: accepted (with a warning) and never fired.
    unknown: HashMap<String, Vec<HookEntry>>,
}

impl HookBus {
    /// Subscribe to a known event.
    pub fn add(&mut self, event: HookEvent, entry: HookEntry) {
        let list = &mut self.by_event[event.index()];
        let at = list.partition_point(|e| e.priority <= entry.priority);
        list.insert(at, entry);
    }

    /// Subscribe to a name the bus does not know (it will never fire).
    pub fn add_unknown(&mut self, name: &str, entry: HookEntry) {
        self.unknown
            .entry(name.to_string())
            .or_default()
            .push(entry);
    }

    /// The subscriptions of `event`, in firing order.
    #[inline]
    pub fn entries(&self, event: HookEvent) -> &[HookEntry] {
        &self.by_event[event.index()]
    }

    /// Subscriptions to names that never fire, by name.
    pub fn unknown(&self) -> &HashMap<String, Vec<HookEntry>> {
        &self.unknown
    }

    /// Every (event name, entry) pair, known events first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HookEntry)> {
        HookEvent::ALL
            .iter()
            .flat_map(move |e| self.entries(*e).iter().map(move |h| (e.name(), h)))
            .chain(
                self.unknown
                    .iter()
                    .flat_map(|(n, v)| v.iter().map(move |h| (n.as_str(), h))),
            )
    }

    /// Remove every subscription of `owner` (rolls back a failed plugin).
    pub fn remove_owner(&mut self, owner: &str) {
        for list in &mut self.by_event {
            list.retain(|e| e.owner != owner);
        }
        for list in self.unknown.values_mut() {
            list.retain(|e| e.owner != owner);
        }
        self.unknown.retain(|_, v| !v.is_empty());
    }
}
