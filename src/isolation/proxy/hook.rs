//! An isolated plugin's hook callbacks as the registry sees them: each
//! call goes to the plugin's worker (in its tool call's planned batch, or
//! as a request of its own), and what the worker's hook left (edited
//! arguments, the dialect's per-turn and per-session state, UI events)
//! comes back onto the host's side of the call.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::out_of_protocol;
use super::turn::{IsolatedTurn, SessionStates};
use crate::core::hooks::{
    CallState, HookAction, HookCallback, HookError, HookEvent, HookPayload, HookReturn,
    LoopContext, ToolCallContext, TurnScope,
};
use crate::isolation::batch::{Claim, Plan};
use crate::isolation::protocol::{
    LoopAfter, LoopWire, PayloadWire, Reply, Request, Step, ToolCallWire,
};
use crate::isolation::supervisor::{Subject, Supervisor};

/// Where a tool call's arguments as its hooks edited them are kept.
type EditSlot = Arc<Mutex<Option<Map<String, Value>>>>;

/// Arguments edited by an isolated plugin's hook, kept on the call's
/// context: dispatch hands them to the handler (see
/// [`CallState::edited_params`]) and later hooks see them; and the call's
/// [plan](crate::isolation::batch), when its plugin's hooks go with its tool.
pub(in crate::isolation) struct IsolatedParams {
    pub(super) params: EditSlot,
    pub(in crate::isolation) plan: Option<Arc<Plan>>,
}

impl CallState for IsolatedParams {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn edited_params(&mut self) -> Option<Map<String, Value>> {
        self.params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A hook callback of an isolated plugin.
pub(super) struct ProxyHook {
    pub(super) sup: Supervisor,
    pub(super) index: usize,
    /// The dialect's name of its event, for `hook_errors`.
    pub(super) event_name: Option<String>,
    /// The row of its dialect's event it registered by (how it fails).
    pub(super) row: Option<&'static crate::core::hooks::EventRow>,
    /// The event as the plugin named it, for the log and a stop's reason.
    pub(super) shown: Arc<str>,
    /// The lane it subscribes to runs around a call (an execution
    /// middleware, [`crate::isolation::around`]): that lane's name.
    pub(super) around: Option<&'static str>,
}

/// How a hook's call reaches its worker: in its call's planned batch (the
/// batch itself, when this step is the first), or as a request of its own.
// Made once per hook call and moved into its future: boxing the request
// would add an allocation to every call that is not planned.
#[allow(clippy::large_enum_variant)]
enum Outgoing {
    Planned(Arc<Plan>, Option<Box<Request>>),
    Own(Request),
}

/// Where a loop-point hook's report of the session's state goes.
struct StateReport {
    turn: Arc<IsolatedTurn>,
    states: Arc<SessionStates>,
    session: String,
}

/// Where what the worker's hook left goes back to: the edits to the
/// arguments, for tool events; the turn, the dialect's chain and the
/// session's state, for loop points.
#[derive(Default)]
struct Back {
    edits: Option<EditSlot>,
    turn: Option<Arc<TurnScope>>,
    chain: Option<Box<dyn Fn(Value) + Send + Sync>>,
    report: Option<StateReport>,
}

impl HookCallback for ProxyHook {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let mut payload = payload;
        let mut back = Back::default();
        let outgoing = match &mut payload {
            HookPayload::Tool(ctx) => self.tool_call(event, ctx, &mut back),
            HookPayload::Loop(lc) => self.loop_call(event, lc, &mut back),
            other => self.own(event, PayloadWire::of(other)),
        };
        let sup = self.sup.clone();
        let shown = self.shown.clone();
        let what = Subject::Hook(shown.clone());
        HookReturn::Pending(Box::pin(async move {
            let reply = match outgoing {
                Outgoing::Planned(plan, first) => plan.take(first, what).await,
                Outgoing::Own(request) => sup.request(request, what).await,
            };
            match reply {
                Ok(Reply::Hook {
                    answer,
                    params,
                    after,
                }) => {
                    if let (Some(params), Some(slot)) = (params, &back.edits) {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(params);
                    }
                    if let Some(after) = after {
                        back.after(&sup, *after);
                    }
                    answer.map(Into::into).map_err(HookError::from)
                }
                Ok(other) => Err(HookError::Raised(out_of_protocol(&sup, &other))),
                Err(e) => {
                    if let Some(report) = &back.report {
                        tracing::warn!(
                            "session '{}': isolated plugin '{}' did not answer its {} hook ({e}); what its worker changed in the session's state since its last answer is not stored",
                            report.session,
                            sup.key(),
                            shown
                        );
                    }
                    Err(HookError::Raised(e))
                }
            }
        }))
    }

    fn event_name(&self, _event: HookEvent) -> Option<String> {
        self.event_name.clone()
    }

    /// A row that fails closed in-process (Hermes's `pre_tool_call`)
    /// fails closed isolated too, its worker's crash or time-out included.
    fn row(&self) -> Option<&'static crate::core::hooks::EventRow> {
        self.row
    }

    fn execution(&self) -> Option<&dyn crate::core::callbacks::Execution> {
        self.around
            .is_some()
            .then_some(self as &dyn crate::core::callbacks::Execution)
    }

    /// A guard plugin's failures refuse what it guards.
    fn fail_closed(&self, event: HookEvent, error: &HookError) -> Option<HookAction> {
        self.sup
            .is_guard()
            .then(|| crate::isolation::guard::refusal(self.sup.key(), event, error))
            .flatten()
    }
}

impl crate::core::callbacks::Execution for ProxyHook {
    fn run(
        &self,
        call: &crate::core::callbacks::ExecCall,
        payload: Value,
        next: crate::core::callbacks::Next<'_>,
    ) -> Result<Value, crate::core::callbacks::ExecError> {
        let lane = self.around.unwrap_or(call.kind);
        crate::isolation::around::run_in_worker(&self.sup, self.index, lane, call, payload, next)
    }
}

impl ProxyHook {
    /// The hook's call as a request of its own.
    fn own(&self, event: HookEvent, payload: PayloadWire) -> Outgoing {
        Outgoing::Own(Request::Hook {
            index: self.index,
            event: event.name().to_string(),
            payload,
        })
    }

    /// A tool event's call: in the call's plan when it has one for this
    /// worker; the arguments as edited so far, whose edits come back.
    fn tool_call(&self, event: HookEvent, ctx: &mut ToolCallContext, back: &mut Back) -> Outgoing {
        let (slot, plan) = match ctx.dialect.get_mut::<IsolatedParams>() {
            Some(state) => (state.params.clone(), state.plan.clone()),
            None => {
                // An in-process plugin's hook may hold the call's
                // state, with its edits: they carry over into ours
                // (and an in-process hook after this one starts from
                // ours), so no edit is lost either way round.
                let slot = Arc::new(Mutex::new(ctx.dialect.edited_params()));
                ctx.dialect.set(IsolatedParams {
                    params: slot.clone(),
                    plan: None,
                });
                (slot, None)
            }
        };
        // The call as the worker is to see it: built only when
        // sent (a planned step's was sent with its batch).
        let wire = || {
            let current = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let params = current.unwrap_or_else(|| ctx.params.clone());
            ToolCallWire::with_params(ctx, params)
        };
        let mut planned = None;
        if let Some(plan) = plan.filter(|p| p.is_of(&self.sup)) {
            let step = Step::Hook {
                event: event.name().to_string(),
                index: self.index,
            };
            if let Claim::Planned(first) = plan.claim(&step, wire) {
                planned = Some(Outgoing::Planned(plan, first));
            }
        }
        let outgoing = planned.unwrap_or_else(|| self.own(event, PayloadWire::Tool(wire())));
        back.edits = Some(slot);
        outgoing
    }

    /// A loop point's call: the context, with the turn's number, the
    /// session's state once per turn and worker, and the dialect's
    /// per-turn state, which all come back.
    fn loop_call(&self, event: HookEvent, lc: &mut LoopContext, back: &mut Back) -> Outgoing {
        let mut wire = LoopWire::of(lc);
        if let Some(scope) = &lc.turn {
            let isolated = IsolatedTurn::of(scope, &self.sup);
            wire.turn = isolated.as_ref().map(|t| t.number);
            // A dialect with per-session state: the session's,
            // once the turn owns it, goes there and back.
            let states = self
                .sup
                .dialect_table()
                .and_then(|d| d.abilities().session_state)
                .and(scope.session())
                .and_then(|slots| SessionStates::of(slots));
            if let (Some(isolated), Some(states)) = (isolated, states) {
                wire.session_state = isolated.handover(&self.sup, &states);
                back.report = Some(StateReport {
                    turn: isolated,
                    states,
                    session: lc.session_id.clone(),
                });
            }
            back.turn = Some(scope.clone());
        }
        // The dialect's per-turn state goes there and back.
        if let Some(carried) = self
            .sup
            .dialect_table()
            .and_then(|d| d.abilities().isolated?.carry_out(lc))
        {
            wire.chain = carried.state;
            back.chain = Some(carried.back);
        }
        self.own(event, PayloadWire::Loop(Box::new(wire)))
    }
}

impl Back {
    /// What a loop-point hook left: the dialect's per-turn state, the
    /// session's state (reported), the UI events it emitted.
    fn after(&self, sup: &Supervisor, after: LoopAfter) {
        if let (Some(state), Some(chain)) = (after.chain, &self.chain) {
            chain(state);
        }
        if let (Some(value), Some(report)) = (after.session_state, &self.report) {
            report.turn.reported(sup, &value);
            report.states.report(sup.dialect(), value);
        }
        if let (false, Some(turn)) = (after.ui_events.is_empty(), &self.turn) {
            turn.ui_events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(after.ui_events);
        }
    }
}
