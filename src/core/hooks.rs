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

use crate::core::outcome::PluginError;

/// A boxed, sendable future: what a callback that must wait hands back.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The events of the hook bus: the fourteen lifecycle events of the seed
/// API (the names Flowly and Hermes plugins subscribe to) and the Hermes
/// events plughost's loop can fire (`transform_llm_output`,
/// `subagent_start`, `api_request_error`), then the loop
/// points ([`HookEvent::LOOP_POINTS`]) other dialects map their own events
/// onto. A loop point with two lanes (two firing policies at one place of
/// the loop, as Felix's and Codumentor's differ) is two events, fired in
/// lane order.
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
    /// P0: the host starts serving (`run`, `chat`, `tools call`, `commands run`).
    HostStart,
    /// P1: an inbound message, after `pre_gateway_dispatch`; callbacks edit
    /// [`LoopContext::text`] in place (chain).
    InputReceived,
    /// P2c: `/compact`, before the transcript is rewritten: the first
    /// [`LoopDecision::CancelCompaction`] or [`LoopDecision::Summary`] stops it.
    CompactBefore,
    /// P2c: rewriting the transcript failed ([`LoopContext::error`]).
    CompactFailed,
    /// P4: the turn's history is assembled (once per turn); callbacks edit
    /// [`LoopContext::messages`] (the in-flight list) in place (chain).
    HistoryReady,
    /// P5, first lane: before every model call; every callback sees the same
    /// in-flight list and each [`LoopDecision::Append`] is appended after all ran.
    IterationStart,
    /// P5, second lane: before every model call; edits to the in-flight list
    /// are carried to later iterations (chain).
    PromptAssemble,
    /// P6: this call's message list only (chain): edits are never carried.
    PromptFinal,
    /// P7: immediately before the provider call; `model` and `params` may be edited.
    ModelCallStart,
    /// P7e: the provider call failed; [`LoopDecision::RetryModelCall`] retries it.
    ModelCallError,
    /// P8: the provider answered; [`LoopContext::reply`] may be replaced (chain).
    ModelReplied,
    /// P9, first lane: before a tool call; stops at the first refusal.
    ToolBefore,
    /// P9, second lane: before a tool call; every callback runs, the first
    /// refusal wins and an abort outranks a refusal.
    ToolVet,
    /// P9x: immediately before the handler (after `check_fn`).
    ToolExecuting,
    /// P10, first lane: after the call ran; every callback sees the tool's own
    /// result, answers ([`LoopDecision::Merge`]) are merged, a later key winning.
    ToolAfter,
    /// P10, second lane: after the call ran; callbacks edit
    /// [`LoopContext::result`] in place (chain).
    ToolAfterChain,
    /// P11: the final answer before it is stored; [`LoopContext::text`] may be edited (chain).
    ResponseBeforeSend,
    /// P12: the final answer was stored.
    ResponsePersisted,
    /// P13/P13a/P13i/P13e: the turn ended ([`LoopContext::ended_by`] says how).
    TurnEnded,
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

    /// The loop points after the seed's events, in firing order within a turn.
    pub const LOOP_POINTS: [HookEvent; 19] = [
        HookEvent::HostStart,
        HookEvent::InputReceived,
        HookEvent::CompactBefore,
        HookEvent::CompactFailed,
        HookEvent::HistoryReady,
        HookEvent::IterationStart,
        HookEvent::PromptAssemble,
        HookEvent::PromptFinal,
        HookEvent::ModelCallStart,
        HookEvent::ModelCallError,
        HookEvent::ModelReplied,
        HookEvent::ToolBefore,
        HookEvent::ToolVet,
        HookEvent::ToolExecuting,
        HookEvent::ToolAfter,
        HookEvent::ToolAfterChain,
        HookEvent::ResponseBeforeSend,
        HookEvent::ResponsePersisted,
        HookEvent::TurnEnded,
    ];

    /// How many events the bus has (seed events and loop points).
    pub const COUNT: usize = 17 + 19;

    /// The wire name plugins use (`pre_tool_call`, ...); loop points have
    /// plughost's names (`tool_before`), which no plugin API subscribes to
    /// directly: dialects map their own names onto them.
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
            HookEvent::HostStart => "host_start",
            HookEvent::InputReceived => "input_received",
            HookEvent::CompactBefore => "compact_before",
            HookEvent::CompactFailed => "compact_failed",
            HookEvent::HistoryReady => "history_ready",
            HookEvent::IterationStart => "iteration_start",
            HookEvent::PromptAssemble => "prompt_assemble",
            HookEvent::PromptFinal => "prompt_final",
            HookEvent::ModelCallStart => "model_call_start",
            HookEvent::ModelCallError => "model_call_error",
            HookEvent::ModelReplied => "model_replied",
            HookEvent::ToolBefore => "tool_before",
            HookEvent::ToolVet => "tool_vet",
            HookEvent::ToolExecuting => "tool_executing",
            HookEvent::ToolAfter => "tool_after",
            HookEvent::ToolAfterChain => "tool_after_chain",
            HookEvent::ResponseBeforeSend => "response_before_send",
            HookEvent::ResponsePersisted => "response_persisted",
            HookEvent::TurnEnded => "turn_ended",
        }
    }

    /// Parse a seed event's wire name; `None` for names the seed API does
    /// not know (loop points are not subscribed to by name).
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
    /// Every callback sees the original value; their answers (maps) are
    /// merged in order, a later key winning.
    Merge,
    /// The first accepted answer wins and no later callback runs.
    StopAtFirst,
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
    /// A [`LoopDecision`] (loop points only).
    Decide,
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

/// The specification of every event: [`HookEvent::ALL`], then
/// [`HookEvent::LOOP_POINTS`]. Every loop point fails open (a hook is not a
/// security control); what each [`LoopDecision`] does at each point is
/// documented on the decision.
pub const HOOK_SPECS: [HookSpec; HookEvent::COUNT] = [
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
    spec(HookEvent::HostStart, Policy::Observe, &[]),
    spec(HookEvent::InputReceived, Policy::Chain, DECIDE),
    spec(HookEvent::CompactBefore, Policy::StopAtFirst, DECIDE),
    spec(HookEvent::CompactFailed, Policy::Observe, &[]),
    spec(HookEvent::HistoryReady, Policy::FirstWins, DECIDE),
    spec(HookEvent::IterationStart, Policy::Collect, DECIDE),
    spec(HookEvent::PromptAssemble, Policy::Chain, DECIDE),
    // Edits chain; every append is kept (Codumentor's `insert_step`).
    spec(HookEvent::PromptFinal, Policy::Collect, DECIDE),
    spec(HookEvent::ModelCallStart, Policy::Chain, DECIDE),
    spec(HookEvent::ModelCallError, Policy::FirstWins, DECIDE),
    spec(HookEvent::ModelReplied, Policy::FirstWins, DECIDE),
    spec(HookEvent::ToolBefore, Policy::StopAtFirst, DECIDE),
    spec(HookEvent::ToolVet, Policy::Collect, DECIDE),
    spec(HookEvent::ToolExecuting, Policy::Observe, &[]),
    spec(HookEvent::ToolAfter, Policy::Merge, DECIDE),
    // The point keeps the first of each kind (a short-circuit, a re-run) and every append.
    spec(HookEvent::ToolAfterChain, Policy::Collect, DECIDE),
    spec(HookEvent::ResponseBeforeSend, Policy::Chain, DECIDE),
    spec(HookEvent::ResponsePersisted, Policy::Observe, &[]),
    spec(HookEvent::TurnEnded, Policy::Observe, &[]),
];

const DECIDE: &[ActionKind] = &[ActionKind::Decide];

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
    /// The call runs inside a `delegate` sub-agent (Felix's `manifest_id`).
    pub delegate: bool,
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
#[derive(Debug, Default)]
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
    /// P1: the inbound text (editable); P11: the answer (editable); P12,
    /// P13a: the answer stored.
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
    pub ended_by: String,
    /// P13a: the abort reason.
    pub reason: Option<String>,
    /// P0: the keys of the plugins that contributed tools or hooks.
    pub plugins: Vec<String>,
    /// The turn this point fires in (absent for a tool called outside a turn).
    pub turn: Option<Arc<TurnScope>>,
    pub stage: Option<HookEvent>,
    pub dialect: DialectState,
}

/// What a loop-point callback asks of the loop. Each point honours only the
/// decisions listed on it; any other is ignored with a warning (the point
/// cannot act on it).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, Serialize)]
pub enum LoopDecision {
    /// An edit of the point's context, applied before the next callback
    /// runs (so later callbacks see it: chaining), at any point whose
    /// context has that field. Edits are not answers: the point's policy
    /// counts only the other decisions.
    Edit(LoopEdit),
    /// P5 (`iteration_start`), P6 and P10 (`tool_after_chain`): append these
    /// messages to the in-flight list (carried to later iterations, never stored).
    Append(Vec<Value>),
    /// P9: refuse the call; `text` is the result the model sees, `reason`
    /// the block message; `terminate` marks the call (see [`LoopDecision::Terminate`]).
    Refuse {
        text: String,
        reason: String,
        terminate: bool,
    },
    /// P9 (`tool_vet`): end the turn after this batch with `assistant_text`
    /// as the answer; outranks a refusal. The call itself is refused with `text`.
    AbortTurn {
        reason: String,
        assistant_text: String,
        text: String,
    },
    /// P4, P8, P10: end the loop with this text as the answer.
    ShortCircuit(String),
    /// P10 (`tool_after`): keys merged over earlier answers: `content`
    /// replaces the result (a failure keeps its tag), `terminate` marks the call.
    Merge(Map<String, Value>),
    /// P10 (`tool_after_chain`): mark the call; when every call of a batch
    /// is marked, the turn ends after it with the reply that carried them.
    Terminate,
    /// P7e: call the provider again after `delay_ms` (at most
    /// [`MAX_MODEL_RETRIES`] times per call).
    RetryModelCall { delay_ms: u64 },
    /// P2c: leave the transcript as it is.
    CancelCompaction,
    /// P2c: replace the dropped messages with this summary.
    Summary(String),
    /// P10 (`tool_after_chain`): after `delay_ms`, run the call once more
    /// through the whole pipeline with `arguments` (`None`: the same ones);
    /// its result replaces this one. A re-run is never re-run again.
    RerunTool {
        arguments: Option<Map<String, Value>>,
        delay_ms: u64,
    },
}

/// The priority a dialect registers its loop-point callbacks at so that they
/// run before every prioritised dialect's at the same point (the spec's
/// cross-dialect order: Felix, then Codumentor); equal priorities keep
/// registration order.
pub const FIRST_LANE_PRIORITY: i32 = i32::MIN;

/// An edit of a [`LoopContext`] field (see [`LoopDecision::Edit`]).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, Serialize)]
pub enum LoopEdit {
    /// Replace [`LoopContext::messages`].
    Messages(Vec<Value>),
    /// Replace [`LoopContext::text`].
    Text(String),
    /// Replace [`LoopContext::result`].
    Result(String),
    /// Replace [`LoopContext::reply`].
    Reply(Value),
    /// Replace [`LoopContext::model`].
    Model(String),
    /// Merge into [`LoopContext::params`].
    Params(Map<String, Value>),
    /// Replace [`LoopContext::tools`] (what this call offers).
    Tools(Vec<Value>),
    /// Append to [`LoopContext::messages`].
    Append(Vec<Value>),
    /// Replace [`LoopContext::tool_call`]'s arguments (P9: the call runs
    /// with them, validated again).
    Arguments(Value),
    /// Several edits, in order (one answer that changes several fields).
    All(Vec<LoopEdit>),
}

impl LoopEdit {
    /// Apply the edit to `ctx`.
    pub fn apply(self, ctx: &mut LoopContext) {
        match self {
            LoopEdit::Messages(m) => ctx.messages = m,
            LoopEdit::Text(t) => ctx.text = t,
            LoopEdit::Result(r) => ctx.result = r,
            LoopEdit::Reply(r) => ctx.reply = r,
            LoopEdit::Model(m) => ctx.model = m,
            LoopEdit::Params(p) => ctx.params.extend(p),
            LoopEdit::Tools(t) => ctx.tools = t,
            LoopEdit::Append(m) => ctx.messages.extend(m),
            LoopEdit::Arguments(a) => ctx.tool_call.arguments = a,
            LoopEdit::All(edits) => {
                for edit in edits {
                    edit.apply(ctx);
                }
            }
        }
    }
}

/// How often one model call is retried on [`LoopDecision::RetryModelCall`].
pub const MAX_MODEL_RETRIES: usize = 3;

/// A hook call of this turn that failed, as `run --json` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HookErrorRecord {
    pub plugin: String,
    /// The plugin's dialect (filled from the host's records when the turn ends).
    pub dialect: String,
    /// The dialect's own name of the event (`before_tool`).
    pub event: String,
    /// `module.qualname` of the callback.
    pub handler: String,
    /// `<ExceptionType>: <message>`, the timeout text, or a wrong-shape sentence.
    pub error: String,
}

/// What one turn shares across its points and the dialects' callbacks:
/// the hook errors it collects, Codumentor's UI events, and one slot per
/// dialect for per-turn state (a dialect's shared `ctx`).
#[derive(Default)]
pub struct TurnScope {
    pub hook_errors: std::sync::Mutex<Vec<HookErrorRecord>>,
    pub ui_events: std::sync::Mutex<Vec<Value>>,
    slots: std::sync::Mutex<HashMap<&'static str, Arc<dyn std::any::Any + Send + Sync>>>,
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
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let entry = slots.entry(name).or_insert_with(|| Arc::new(init()));
        entry.clone().downcast::<T>().ok()
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

/// The context handed to a callback, by event family.
#[derive(Debug)]
pub enum HookPayload<'a> {
    Tool(&'a mut ToolCallContext),
    Llm(&'a mut LlmCallContext),
    Session(&'a mut SessionContext),
    Subagent(&'a mut SubagentStopContext),
    Gateway(&'a mut GatewayContext),
    /// A loop point.
    Loop(&'a mut LoopContext),
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
            HookPayload::Loop(c) => HookPayload::Loop(c),
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
            HookPayload::Loop(c) => &mut c.stage,
        };
        *stage = Some(event);
    }
}

/// What a callback asks of the runtime; each event honours only its own kinds
/// (its row of [`HOOK_SPECS`]); any other answer is counted as a wrong
/// shape and ignored.
#[derive(Clone, Debug, PartialEq)]
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
    /// A loop point's decision.
    Decide(LoopDecision),
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
            HookAction::Decide(_) => ActionKind::Decide,
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
    /// The dialect's own name of `event` for this callback (`before_tool`),
    /// as `hook_errors` reports it; `None`: the bus's name.
    fn event_name(&self, event: HookEvent) -> Option<String> {
        let _ = event;
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
#[derive(Debug, Clone)]
pub struct HookBus {
    by_event: [Vec<HookEntry>; HookEvent::COUNT],
    /// Names no event matches: accepted (with a warning) and never fired.
    unknown: HashMap<String, Vec<HookEntry>>,
}

impl Default for HookBus {
    fn default() -> Self {
        HookBus {
            by_event: std::array::from_fn(|_| Vec::new()),
            unknown: HashMap::new(),
        }
    }
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
            .chain(HookEvent::LOOP_POINTS.iter())
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
