//! What subscribes to the bus: the payloads a callback is shown, the
//! answers it gives, its failures and counters, its subscription entry, and
//! the contract of a callback that runs around a call instead of answering
//! (execution middleware).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::core::contexts::{
    GatewayContext, LlmCallContext, LoopContext, SessionContext, SubagentStopContext,
    ToolCallContext,
};
use crate::core::decisions::LoopDecision;
use crate::core::outcome::PluginError;
use crate::core::points::{ActionKind, BoxFuture, FailMode, HookEvent};

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
/// (its row of [`HOOK_SPECS`](crate::core::lanes::HOOK_SPECS)); any other answer is counted as a wrong
/// shape and ignored.
#[derive(Clone, Debug, PartialEq)]
pub enum HookAction {
    /// Nothing to do (observe only).
    Continue,
    /// `tool_guard`: abort the call with this message.
    Block(String),
    /// `inbound_gate`: drop the inbound message.
    Skip(String),
    /// `inbound_gate`: replace the inbound text.
    Rewrite(String),
    /// `result_rewrite` and `exec_output_rewrite`: replace the output with this text.
    Replace(String),
    /// `prompt_context`: inject this context into the user message.
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
    /// The second field names the event as the plugin subscribed to it.
    #[error("answered {0}, which {1} does not accept; the answer is ignored")]
    WrongShape(String, String),
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
    /// The row of its dialect's event this callback subscribed by
    /// ([`EventRow`]): how it fails ([`EventRow::on_error`]) is the row's.
    /// `None`: a callback of no dialect's row (native, or a dialect's own
    /// helper); the lane's rule applies.
    fn row(&self) -> Option<&'static EventRow> {
        None
    }
    /// The refusal this callback stands for when it fails on `event`
    /// whatever its row and lane say: a plugin that declares itself a guard
    /// ([`crate::isolation::guard`]). `None`: the row's and the lane's rule
    /// apply.
    fn fail_closed(&self, event: HookEvent, error: &HookError) -> Option<HookAction> {
        let _ = (event, error);
        None
    }
    /// The dialect's own name of `event` for this callback,
    /// as logs and `hook_errors` report it: by default its row's; `None`:
    /// the bus's name.
    fn event_name(&self, event: HookEvent) -> Option<String> {
        let _ = event;
        self.row().map(|row| row.name.to_string())
    }
    /// The tools this callback's tool events are for, when it declared them
    /// (a Flowly callback's `__plughost_tools__`): the pipeline does not
    /// call it for any other tool's `tool_guard`, `tool_done` or
    /// `result_rewrite` and `exec_output_rewrite`, so a guard of `exec` costs other calls nothing.
    /// `None`: every tool.
    fn tools(&self) -> Option<&[String]> {
        None
    }
    /// Whether this callback answers `event` in Rust alone (no Python, no
    /// blocking: tool-audit's native call log): a host that bounds hooks
    /// by handing them to another thread runs it in place instead, since
    /// there is nothing to abandon.
    fn native(&self, event: HookEvent) -> bool {
        let _ = event;
        false
    }
    /// This callback as an execution middleware (a subscription of a lane
    /// of form [`LaneForm::Around`](crate::core::points::LaneForm::Around),
    /// which wraps the call instead of answering).
    fn execution(&self) -> Option<&dyn Execution> {
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

/// An event a plugin API names, as a row of its dialect: the lane its
/// callbacks are subscribed to, and what a callback that fails does there.
/// Dialects that share a lane (Flowly's and Hermes's `tool_guard`) have
/// their callbacks fire in one order; each dialect's row says how its own
/// callbacks fail (Hermes's guards fail closed, Flowly's open).
#[derive(Clone, Copy, Debug)]
pub struct EventRow {
    /// The plugin API's name of the event (`tool_guard`).
    pub name: &'static str,
    /// The lane it fires on.
    pub lane: HookEvent,
    /// [`FailMode::Closed`]: a callback that raises, times out or cannot
    /// run stands for the lane's refusal ([`crate::core::fire::refusal`]),
    /// whose reason is [`EventRow::refused`].
    pub on_error: FailMode,
    /// The reason a fail-closed row's refusal gives for the failure of a
    /// callback named `label`.
    pub refused: fn(label: &str, error: &HookError) -> String,
    /// Where several events of the dialect fire on one lane, their order
    /// there (lower first), which the dialect makes priorities of.
    pub rank: i32,
}

impl EventRow {
    /// The name `rows` (a dialect's) give `lane`: the first row's that
    /// fires on it; the bus's name for a lane none of them fires on.
    pub fn name_among(rows: &'static [EventRow], lane: HookEvent) -> &'static str {
        rows.iter()
            .find(|r| r.lane == lane)
            .map_or_else(|| lane.name(), |r| r.name)
    }

    /// A row of `name` on `lane` that fails open.
    pub const fn open(name: &'static str, lane: HookEvent) -> EventRow {
        EventRow {
            name,
            lane,
            on_error: FailMode::Open,
            refused: failed,
            rank: 0,
        }
    }

    /// This row with rank `rank` among its dialect's events on its lane.
    pub const fn ranked(self, rank: i32) -> EventRow {
        EventRow { rank, ..self }
    }

    /// A row of `name` on `lane` that fails closed, the refusal's reason
    /// made by `refused`.
    pub const fn closed(
        name: &'static str,
        lane: HookEvent,
        refused: fn(&str, &HookError) -> String,
    ) -> EventRow {
        EventRow {
            name,
            lane,
            on_error: FailMode::Closed,
            refused,
            rank: 0,
        }
    }
}

/// The reason of a refusal by default: which callback failed, and how.
pub fn failed(label: &str, error: &HookError) -> String {
    format!("hook {label} failed: {error}")
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

impl HookEntry {
    /// `event` as this callback's plugin named it, for
    /// what a user reads; the bus's name of the lane for a callback of no
    /// dialect (registered from Rust).
    pub fn event_shown(&self, event: HookEvent) -> String {
        self.callback
            .event_name(event)
            .unwrap_or_else(|| event.name().to_string())
    }

    /// Whether a tool event of tool `name` calls this entry: it declared no
    /// tools ([`HookCallback::tools`]) or named this one.
    pub fn is_for_tool(&self, name: &str) -> bool {
        self.callback
            .tools()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }
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

/// Why an execution chain did not produce a result (it crosses to an
/// isolated plugin's worker and back).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ExecError {
    /// A middleware stopped the call on purpose (`LLMExecutionBlocked`):
    /// never skipped, always the chain's answer.
    Blocked {
        reason: String,
        metadata: Map<String, Value>,
    },
    /// The middleware itself failed (it is skipped unless `next` ran).
    Failed(String),
    /// What `next` ran failed (the terminal call or a later middleware).
    Downstream(String),
}

/// What an execution middleware is shown besides its payload.
#[derive(Clone, Debug, Default)]
pub struct ExecCall {
    /// The name of the lane the chain is of (what its messages say).
    pub kind: &'static str,
    pub session_id: String,
    /// The tool's name (a chain around a tool); empty for a model call.
    pub tool: String,
    /// The payload before any middleware changed it.
    pub original: Value,
}

/// The rest of a chain, as a middleware calls it (single use).
pub type Next<'a> = &'a mut dyn FnMut(Value) -> Result<Value, ExecError>;

/// A subscription to an execution lane.
pub trait Execution: Send + Sync + 'static {
    /// Run around `next` (synchronously: the chain runs on one thread).
    fn run(&self, call: &ExecCall, payload: Value, next: Next<'_>) -> Result<Value, ExecError>;
}
