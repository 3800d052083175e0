//! The events of the bus (the lane ids), the row that says how a lane
//! combines its callbacks' answers, and the places of the loop they fire at.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

/// A boxed, sendable future: what a callback that must wait hands back.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The lanes of the hook bus: the core's own vocabulary, each a lane of
/// one [`Point`]. The first seventeen have payloads of their own kind (a
/// tool call, a model call, a session, a sub-agent: [`HookEvent::ALL`]);
/// the loop points after them ([`HookEvent::LOOP_POINTS`]) show a
/// [`LoopContext`](crate::core::contexts::LoopContext) and answer with
/// decisions. Plugin APIs name their events otherwise: each dialect's
/// rows ([`EventRow`](crate::core::callbacks::EventRow)) say which lane an
/// event of its own name fires on, and a dialect whose plugins need a
/// policy no core lane has brings a lane of its own ([`HookEvent::Lane`]).
/// A point with two lanes fires them in lane order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum HookEvent {
    /// P9: before a tool call runs; the first block refuses it.
    ToolGuard,
    /// P10: after a tool's handler returned or raised.
    ToolDone,
    /// P10: the result on its way to the model; the first replacement wins.
    ResultRewrite,
    /// P10: the built-in `exec` tool's output, before the other lanes of the call see it.
    ExecOutputRewrite,
    /// P5: before each model call; every answer is context joined to the latest user message.
    PromptContext,
    /// P8: after each model call, with the assistant's answer.
    ExchangeDone,
    /// P7: just before the provider request is sent.
    RequestSending,
    /// P8: just after the provider answered.
    ResponseArrived,
    /// On a session's first message.
    SessionOpened,
    /// P13: at the end of every turn, also a failed or cancelled one.
    TurnClosed,
    /// Once per session, when the agent shuts down or evicts it.
    SessionClosing,
    /// When the session starts over (`/new`, `/clear`).
    SessionCleared,
    /// When a sub-agent finished.
    SubagentDone,
    /// P1: a message arrives; the first skip drops it, the first rewrite replaces its text.
    InboundGate,
    /// P11: the turn's final reply on its way to the user; the first replacement wins.
    ReplyRewrite,
    /// When a sub-agent starts, with its goal.
    SubagentBegun,
    /// P7e: a model call failed, with the error.
    RequestFailed,
    /// P0: the host starts serving (`run`, `chat`, `tools call`, `commands run`).
    HostStart,
    /// P1: an inbound message, after `inbound_gate`; callbacks edit
    /// [`LoopContext::text`](crate::core::contexts::LoopContext::text) in place (chain).
    InputReceived,
    /// P2c: `/compact`, before the transcript is rewritten: the first
    /// [`LoopDecision::CancelCompaction`](crate::core::decisions::LoopDecision::CancelCompaction) or [`LoopDecision::Summary`](crate::core::decisions::LoopDecision::Summary) stops it.
    CompactBefore,
    /// P2c: rewriting the transcript failed ([`LoopContext::error`](crate::core::contexts::LoopContext::error)).
    CompactFailed,
    /// P4: the turn's history is assembled (once per turn); callbacks edit
    /// [`LoopContext::messages`](crate::core::contexts::LoopContext::messages) (the in-flight list) in place (chain).
    HistoryReady,
    /// P6: this call's message list only (chain): edits are never carried.
    PromptFinal,
    /// P7: immediately before the provider call; `model` and `params` may be edited.
    ModelCallStart,
    /// P7e: the provider call failed; [`LoopDecision::RetryModelCall`](crate::core::decisions::LoopDecision::RetryModelCall) retries it.
    ModelCallError,
    /// P8: the provider answered; [`LoopContext::reply`](crate::core::contexts::LoopContext::reply) may be replaced (chain).
    ModelReplied,
    /// P9x: immediately before the handler (after `check_fn`).
    ToolExecuting,
    /// P11: the final answer before it is stored; [`LoopContext::text`](crate::core::contexts::LoopContext::text) may be edited (chain).
    ResponseBeforeSend,
    /// P12: the final answer was stored.
    ResponsePersisted,
    /// P13/P13a/P13i/P13e: the turn ended ([`LoopContext::ended_by`](crate::core::contexts::LoopContext::ended_by) says how).
    TurnEnded,
    /// A lane a dialect brought to a point, as its row says
    /// ([`crate::core::points::Lane`]): where the dialect's plugins need a
    /// policy at a point that no other lane there has (Felix's
    /// one dialect's guard stops at the first refusal, another's
    /// hears every callback).
    Lane(LaneId),
}

impl HookEvent {
    /// The lanes with payloads of their own kind, in declaration order.
    pub const ALL: [HookEvent; 17] = [
        HookEvent::ToolGuard,
        HookEvent::ToolDone,
        HookEvent::ResultRewrite,
        HookEvent::ExecOutputRewrite,
        HookEvent::PromptContext,
        HookEvent::ExchangeDone,
        HookEvent::RequestSending,
        HookEvent::ResponseArrived,
        HookEvent::SessionOpened,
        HookEvent::TurnClosed,
        HookEvent::SessionClosing,
        HookEvent::SessionCleared,
        HookEvent::SubagentDone,
        HookEvent::InboundGate,
        HookEvent::ReplyRewrite,
        HookEvent::SubagentBegun,
        HookEvent::RequestFailed,
    ];

    /// The loop points after the seed's events, in firing order within a turn.
    pub const LOOP_POINTS: [HookEvent; 13] = [
        HookEvent::HostStart,
        HookEvent::InputReceived,
        HookEvent::CompactBefore,
        HookEvent::CompactFailed,
        HookEvent::HistoryReady,
        HookEvent::PromptFinal,
        HookEvent::ModelCallStart,
        HookEvent::ModelCallError,
        HookEvent::ModelReplied,
        HookEvent::ToolExecuting,
        HookEvent::ResponseBeforeSend,
        HookEvent::ResponsePersisted,
        HookEvent::TurnEnded,
    ];

    /// How many lanes the core has (its own-payload lanes and loop points).
    pub const COUNT: usize = 17 + 13;

    /// The bus's name of the lane (`tool_guard`), as the isolation protocol
    /// carries it; a dialect's rows map its plugins' event names onto it,
    /// and what a user reads names the event as the plugin wrote it.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::ToolGuard => "tool_guard",
            HookEvent::ToolDone => "tool_done",
            HookEvent::ResultRewrite => "result_rewrite",
            HookEvent::ExecOutputRewrite => "exec_output_rewrite",
            HookEvent::PromptContext => "prompt_context",
            HookEvent::ExchangeDone => "exchange_done",
            HookEvent::RequestSending => "request_sending",
            HookEvent::ResponseArrived => "response_arrived",
            HookEvent::SessionOpened => "session_opened",
            HookEvent::TurnClosed => "turn_closed",
            HookEvent::SessionClosing => "session_closing",
            HookEvent::SessionCleared => "session_cleared",
            HookEvent::SubagentDone => "subagent_done",
            HookEvent::InboundGate => "inbound_gate",
            HookEvent::ReplyRewrite => "reply_rewrite",
            HookEvent::SubagentBegun => "subagent_begun",
            HookEvent::RequestFailed => "request_failed",
            HookEvent::HostStart => "host_start",
            HookEvent::InputReceived => "input_received",
            HookEvent::CompactBefore => "compact_before",
            HookEvent::CompactFailed => "compact_failed",
            HookEvent::HistoryReady => "history_ready",
            HookEvent::PromptFinal => "prompt_final",
            HookEvent::ModelCallStart => "model_call_start",
            HookEvent::ModelCallError => "model_call_error",
            HookEvent::ModelReplied => "model_replied",
            HookEvent::ToolExecuting => "tool_executing",
            HookEvent::ResponseBeforeSend => "response_before_send",
            HookEvent::ResponsePersisted => "response_persisted",
            HookEvent::TurnEnded => "turn_ended",
            HookEvent::Lane(id) => id.lane().name,
        }
    }

    /// The slot of a core event in the bus's table; a dialect's lane has none.
    #[inline]
    pub(crate) fn index(self) -> usize {
        match self {
            HookEvent::Lane(_) => usize::MAX,
            // SAFETY: `HookEvent` is `#[repr(u8)]`, so (the Reference,
            // "Primitive representations") its layout starts with its `u8`
            // discriminant, and the core events are its first variants,
            // numbered 0.. in declaration order.
            core => unsafe { *(&core as *const HookEvent as *const u8) as usize },
        }
    }
}

/// A lane serialises as its bus name (`tool_guard`, `history_ready`).
impl Serialize for HookEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The places of the loop where the bus fires, whichever plugin API
/// subscribes there. Each [`HookEvent`] is a *lane* of one point (its
/// [`HookEvent::point`]): the core's lanes ([`Point::lanes`]) and the lanes
/// dialects brought to the point ([`HookEvent::Lane`], in their rows'
/// order), each combining its callbacks' answers by its row
/// ([`HookEvent::spec`]); the point's firing function hands the caller the
/// combined, typed answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    HostStart,
    InboundMessage,
    SessionStart,
    HistoryReady,
    PromptAssembly,
    FinalPrompt,
    ModelCallBefore,
    ModelCallAfter,
    ModelError,
    ToolBefore,
    ToolAround,
    ToolAfter,
    ResultTransform,
    ReplyBeforeSend,
    ReplyTransform,
    Persisted,
    TurnEnded,
    SessionReset,
    SessionFinalize,
    Compaction,
    SubagentStart,
    SubagentStop,
    /// Before a plugin's scheduled task runs (no core lane: dialects bring
    /// theirs, as Codumentor's gate does).
    ScheduledRun,
    /// A scheduled task was disabled after failing too often in a row.
    ScheduledDisabled,
    /// After a reload swapped in a new plugin set (no core lane: Codumentor
    /// brings a lane here).
    Reloaded,
    /// Before a recognised slash command's handler runs in the agent (no
    /// core lane: Hermes brings an observer lane).
    CommandBefore,
    /// The model's reply has no tool calls and is about to become the
    /// turn's final answer (no core lane: dialects bring theirs). A lane may
    /// answer [`LoopDecision::ContinueTurn`](crate::core::decisions::LoopDecision::ContinueTurn):
    /// the answer is kept as an interim message and the model is called
    /// again, at most [`MAX_ANSWER_CONTINUATIONS`](crate::core::contexts::MAX_ANSWER_CONTINUATIONS)
    /// times per turn.
    AnswerReady,
    /// A model call's streamed answer begins (each attempt; no core lane:
    /// dialects bring their observers).
    /// Fired off the token path ([`crate::agent`]'s stream observers).
    StreamStart,
    /// A piece of a model call's streamed text (no core lane).
    StreamDelta,
    /// A model call's streamed answer ended, with its text or its error
    /// (no core lane).
    StreamEnd,
    /// The model's text that accompanies tool calls (or an answer a lane of
    /// [`Point::AnswerReady`] kept the turn going past) becomes an interim
    /// message of the turn (no core lane).
    InterimMessage,
    /// A messaging platform's adapter reported an event that is not a
    /// message (a reaction, an edit, a deletion), under `serve`'s gateway
    /// (no core lane: dialects bring their observers).
    PlatformEvent,
}

impl Point {
    /// Every point, in the order a turn meets them.
    pub const ALL: [Point; 32] = [
        Point::HostStart,
        Point::InboundMessage,
        Point::SessionStart,
        Point::HistoryReady,
        Point::PromptAssembly,
        Point::FinalPrompt,
        Point::ModelCallBefore,
        Point::ModelCallAfter,
        Point::ModelError,
        Point::ToolBefore,
        Point::ToolAround,
        Point::ToolAfter,
        Point::ResultTransform,
        Point::ReplyBeforeSend,
        Point::ReplyTransform,
        Point::Persisted,
        Point::TurnEnded,
        Point::SessionReset,
        Point::SessionFinalize,
        Point::Compaction,
        Point::SubagentStart,
        Point::SubagentStop,
        Point::ScheduledRun,
        Point::ScheduledDisabled,
        Point::Reloaded,
        Point::CommandBefore,
        Point::AnswerReady,
        Point::StreamStart,
        Point::StreamDelta,
        Point::StreamEnd,
        Point::InterimMessage,
        Point::PlatformEvent,
    ];

    /// The core's lanes of the point, in firing order; the lanes dialects
    /// brought to it fire in their rows' order
    /// ([`HookBus::lanes_at`](crate::core::bus::HookBus::lanes_at)).
    pub fn lanes(self) -> &'static [HookEvent] {
        use HookEvent as E;
        match self {
            Point::HostStart => &[E::HostStart],
            Point::InboundMessage => &[E::InboundGate, E::InputReceived],
            Point::SessionStart => &[E::SessionOpened],
            Point::HistoryReady => &[E::HistoryReady],
            Point::PromptAssembly => &[E::PromptContext],
            Point::FinalPrompt => &[E::PromptFinal],
            Point::ModelCallBefore => &[E::RequestSending, E::ModelCallStart],
            Point::ModelCallAfter => &[E::ResponseArrived, E::ExchangeDone, E::ModelReplied],
            Point::ModelError => &[E::ModelCallError, E::RequestFailed],
            Point::ToolBefore => &[E::ToolGuard],
            Point::ToolAround => &[E::ToolExecuting],
            Point::ToolAfter => &[E::ToolDone],
            Point::ResultTransform => &[E::ExecOutputRewrite, E::ResultRewrite],
            Point::ReplyBeforeSend => &[E::ResponseBeforeSend],
            Point::ReplyTransform => &[E::ReplyRewrite],
            Point::Persisted => &[E::ResponsePersisted],
            Point::TurnEnded => &[E::TurnClosed, E::TurnEnded],
            Point::SessionReset => &[E::SessionCleared],
            Point::SessionFinalize => &[E::SessionClosing],
            Point::Compaction => &[E::CompactBefore, E::CompactFailed],
            Point::SubagentStart => &[E::SubagentBegun],
            Point::SubagentStop => &[E::SubagentDone],
            Point::ScheduledRun | Point::ScheduledDisabled => &[],
            Point::Reloaded => &[],
            Point::CommandBefore => &[],
            Point::AnswerReady => &[],
            Point::StreamStart
            | Point::StreamDelta
            | Point::StreamEnd
            | Point::InterimMessage
            | Point::PlatformEvent => &[],
        }
    }
}

impl HookEvent {
    /// The point this lane belongs to.
    pub fn point(self) -> Point {
        if let HookEvent::Lane(id) = self {
            return id.lane().point;
        }
        Point::ALL
            .into_iter()
            .find(|p| p.lanes().contains(&self))
            .expect("every lane belongs to one point")
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
    /// Every callback runs; only refusals count (a refused call, an
    /// aborted turn): the first, an abort outranking a refusal.
    Veto,
    /// Every callback runs; the first answer of each kind counts, and
    /// every append (what each callback may add).
    FirstOfEach,
}

/// The kinds of [`HookAction`](crate::core::callbacks::HookAction), for the accepted-answers table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    Block,
    Skip,
    Rewrite,
    Replace,
    Inject,
    /// A [`LoopDecision`](crate::core::decisions::LoopDecision) (loop points only).
    Decide,
}

/// What a callback that fails does to the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// The failure is logged and counted; the event goes on (every Flowly event).
    Open,
    /// The failure counts as the event's refusal (a guard that cannot
    /// decide blocks): a failing `tool_guard` callback blocks the call.
    Closed,
}

/// Whether a lane's callbacks answer once, or wrap what the point does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneForm {
    /// Each callback is called once per firing and answers.
    Plain,
    /// Each registration is a before/after pair around what the point does
    /// (the tool's handler), whose state is its own (pluggy's wrappers):
    /// see [`crate::core::wrappers`].
    Wrapper,
    /// Each callback runs around what the point does and calls the rest of
    /// the chain itself (execution middleware, as Hermes's
    /// middleware): see
    /// [`crate::core::pipeline::middleware::run_chain`].
    Around,
}

/// A lane a dialect brings to a point of the loop, as a table row: where
/// it fires, in which order among the point's lanes, and how it combines
/// its callbacks' answers. A dialect whose plugins need a policy at a
/// point that no other lane there has declares its own row in its folder
/// (`src/dialects/<name>/lanes.rs`); the core fires the rows it is given
/// and knows no dialect. Lanes are compared by name, unique across dialects.
#[derive(Debug)]
pub struct Lane {
    /// The bus's name of the lane: what the isolation
    /// protocol carries and the event reference prints.
    pub name: &'static str,
    pub point: Point,
    /// Lower fires first among the point's dialect lanes.
    pub order: u8,
    pub spec: HookSpec,
    pub form: LaneForm,
    /// When the lane fires, for the event reference.
    pub fires: &'static str,
}

impl Lane {
    /// A plain lane of decisions that fails open (every dialect lane today):
    /// `me` is the static being defined, so its row names itself.
    pub const fn plain(
        me: &'static Lane,
        name: &'static str,
        point: Point,
        order: u8,
        policy: Policy,
        fires: &'static str,
    ) -> Lane {
        Lane {
            name,
            point,
            order,
            spec: HookSpec {
                event: HookEvent::Lane(LaneId(me)),
                policy,
                accepts: DECIDE,
                on_error: FailMode::Open,
            },
            form: LaneForm::Plain,
            fires,
        }
    }
}

impl Lane {
    /// A lane whose callbacks wrap what the point does (`form`:
    /// [`LaneForm::Wrapper`] or [`LaneForm::Around`]): they answer nothing
    /// and fail open (a wrapper that fails is skipped).
    pub const fn wrapping(
        me: &'static Lane,
        name: &'static str,
        point: Point,
        order: u8,
        form: LaneForm,
        fires: &'static str,
    ) -> Lane {
        Lane {
            name,
            point,
            order,
            spec: HookSpec {
                event: HookEvent::Lane(LaneId(me)),
                policy: Policy::Observe,
                accepts: &[],
                on_error: FailMode::Open,
            },
            form,
            fires,
        }
    }
}

/// A typed id of a dialect's lane: a reference to its row.
#[derive(Clone, Copy)]
pub struct LaneId(pub &'static Lane);

impl LaneId {
    #[inline]
    pub fn lane(self) -> &'static Lane {
        self.0
    }
}

impl PartialEq for LaneId {
    #[inline]
    fn eq(&self, other: &LaneId) -> bool {
        std::ptr::eq(self.0, other.0) || self.0.name == other.0.name
    }
}

impl Eq for LaneId {}

impl std::hash::Hash for LaneId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state)
    }
}

impl std::fmt::Debug for LaneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
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

/// The answers a loop-point lane honours: typed decisions.
pub(crate) const DECIDE: &[ActionKind] = &[ActionKind::Decide];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_belongs_to_exactly_one_point() {
        for event in HookEvent::ALL.into_iter().chain(HookEvent::LOOP_POINTS) {
            let owners = Point::ALL
                .iter()
                .filter(|p| p.lanes().contains(&event))
                .count();
            assert_eq!(owners, 1, "{event}");
            assert!(event.point().lanes().contains(&event));
        }
        let lanes: usize = Point::ALL.iter().map(|p| p.lanes().len()).sum();
        assert_eq!(lanes, HookEvent::COUNT);
    }

    #[test]
    fn each_core_event_reads_its_own_row() {
        let core: Vec<HookEvent> = HookEvent::ALL
            .into_iter()
            .chain(HookEvent::LOOP_POINTS)
            .collect();
        for (at, event) in core.iter().enumerate() {
            assert_eq!(event.index(), at, "{event}");
            assert_eq!(event.spec().event, *event);
        }
    }
}
