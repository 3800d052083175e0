//! The events of the bus (the lane ids), the row that says how a lane
//! combines its callbacks' answers, and the places of the loop they fire at.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
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
    /// `before_tool` stops at the first refusal, Codumentor's
    /// `onToolInvokeStart` hears every callback).
    Lane(LaneId),
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

    /// How many events the bus has (seed events and loop points).
    pub const COUNT: usize = 17 + 13;

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

    /// Parse a seed event's wire name; `None` for names the seed API does
    /// not know (loop points are not subscribed to by name).
    pub fn from_name(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.name() == name)
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

/// An event serialises as its wire name (`pre_tool_call`, `tool_before`).
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
    /// theirs, as Codumentor's `onScheduledRunGate`).
    ScheduledRun,
    /// A scheduled task was disabled after failing too often in a row.
    ScheduledDisabled,
    /// After a reload swapped in a new plugin set (no core lane: Codumentor
    /// brings `onConfigReload`).
    Reloaded,
    /// Before a recognised slash command's handler runs in the agent (no
    /// core lane: Hermes brings `pre_command`).
    CommandBefore,
}

impl Point {
    /// Every point, in the order a turn meets them.
    pub const ALL: [Point; 26] = [
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
    ];

    /// The core's lanes of the point, in firing order; the lanes dialects
    /// brought to it fire in their rows' order
    /// ([`HookBus::lanes_at`](crate::core::bus::HookBus::lanes_at)).
    pub fn lanes(self) -> &'static [HookEvent] {
        use HookEvent as E;
        match self {
            Point::HostStart => &[E::HostStart],
            Point::InboundMessage => &[E::PreGatewayDispatch, E::InputReceived],
            Point::SessionStart => &[E::OnSessionStart],
            Point::HistoryReady => &[E::HistoryReady],
            Point::PromptAssembly => &[E::PreLlmCall],
            Point::FinalPrompt => &[E::PromptFinal],
            Point::ModelCallBefore => &[E::PreApiRequest, E::ModelCallStart],
            Point::ModelCallAfter => &[E::PostApiRequest, E::PostLlmCall, E::ModelReplied],
            Point::ModelError => &[E::ModelCallError, E::ApiRequestError],
            Point::ToolBefore => &[E::PreToolCall],
            Point::ToolAround => &[E::ToolExecuting],
            Point::ToolAfter => &[E::PostToolCall],
            Point::ResultTransform => &[E::TransformTerminalOutput, E::TransformToolResult],
            Point::ReplyBeforeSend => &[E::ResponseBeforeSend],
            Point::ReplyTransform => &[E::TransformLlmOutput],
            Point::Persisted => &[E::ResponsePersisted],
            Point::TurnEnded => &[E::OnSessionEnd, E::TurnEnded],
            Point::SessionReset => &[E::OnSessionReset],
            Point::SessionFinalize => &[E::OnSessionFinalize],
            Point::Compaction => &[E::CompactBefore, E::CompactFailed],
            Point::SubagentStart => &[E::SubagentStart],
            Point::SubagentStop => &[E::SubagentStop],
            Point::ScheduledRun | Point::ScheduledDisabled => &[],
            Point::Reloaded => &[],
            Point::CommandBefore => &[],
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
    /// decide blocks): a failing `pre_tool_call` callback blocks the call.
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
    /// `tool_execution` and `llm_execution`): see
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
    /// The bus's name of the lane (`tool_before`): what the isolation
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
