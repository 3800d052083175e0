//! The lane table: how each lane of a point combines its callbacks' answers.

use serde::Serialize;

#[allow(unused_imports)]
use crate::core::hooks::*;

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
    // Edits chain; every append is kept (Codumentor's `insert_step`).
    spec(HookEvent::PromptFinal, Policy::Collect, DECIDE),
    spec(HookEvent::ModelCallStart, Policy::Chain, DECIDE),
    spec(HookEvent::ModelCallError, Policy::FirstWins, DECIDE),
    spec(HookEvent::ModelReplied, Policy::FirstWins, DECIDE),
    spec(HookEvent::ToolExecuting, Policy::Observe, &[]),
    spec(HookEvent::ResponseBeforeSend, Policy::Chain, DECIDE),
    spec(HookEvent::ResponsePersisted, Policy::Observe, &[]),
    spec(HookEvent::TurnEnded, Policy::Observe, &[]),
];

const DECIDE: &[ActionKind] = &[ActionKind::Decide];

impl HookEvent {
    /// This event's row: of [`HOOK_SPECS`], or of its dialect's lane.
    #[inline]
    pub fn spec(self) -> &'static HookSpec {
        match self {
            HookEvent::Lane(id) => &id.lane().spec,
            core => &HOOK_SPECS[core.index()],
        }
    }
}
