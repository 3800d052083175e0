//! The lane table: how each core lane of a point combines its callbacks'
//! answers ([`HOOK_SPECS`]). A row's type ([`HookSpec`]) and the dialects'
//! lanes ([`Lane`](crate::core::points::Lane)) are declared beside the
//! events they name, in [`crate::core::points`].

use crate::core::points::{ActionKind, FailMode, HookEvent, HookSpec, Policy, DECIDE};

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
/// security control); what each [`LoopDecision`](crate::core::decisions::LoopDecision) does at each point is
/// documented on the decision.
pub const HOOK_SPECS: [HookSpec; HookEvent::COUNT] = [
    spec(
        HookEvent::ToolGuard,
        Policy::FirstWins,
        &[ActionKind::Block],
    ),
    spec(HookEvent::ToolDone, Policy::Observe, &[]),
    spec(
        HookEvent::ResultRewrite,
        Policy::FirstWins,
        &[ActionKind::Replace],
    ),
    spec(
        HookEvent::ExecOutputRewrite,
        Policy::FirstWins,
        &[ActionKind::Replace],
    ),
    spec(
        HookEvent::PromptContext,
        Policy::Collect,
        &[ActionKind::Inject],
    ),
    spec(HookEvent::ExchangeDone, Policy::Observe, &[]),
    spec(HookEvent::RequestSending, Policy::Observe, &[]),
    spec(HookEvent::ResponseArrived, Policy::Observe, &[]),
    spec(HookEvent::SessionOpened, Policy::Observe, &[]),
    spec(HookEvent::TurnClosed, Policy::Observe, &[]),
    spec(HookEvent::SessionClosing, Policy::Observe, &[]),
    spec(HookEvent::SessionCleared, Policy::Observe, &[]),
    spec(HookEvent::SubagentDone, Policy::Observe, &[]),
    spec(
        HookEvent::InboundGate,
        Policy::FirstWins,
        &[ActionKind::Skip, ActionKind::Rewrite],
    ),
    spec(
        HookEvent::ReplyRewrite,
        Policy::FirstWins,
        &[ActionKind::Replace],
    ),
    spec(HookEvent::SubagentBegun, Policy::Observe, &[]),
    spec(HookEvent::RequestFailed, Policy::Observe, &[]),
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
