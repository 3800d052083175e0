//! The loop points of a tool call (P9 before, P9x around, P10 after): each
//! fires its lanes in order and hands the pipeline one combined, typed
//! answer, so the pipeline's call sites are one line each.
//!
//! Most hosts have no callback at these points, so each point looks first
//! and fires its lanes in a boxed future only when there is one: a call's
//! future holds every stage's state inline, and these stages' states (a
//! loop context, the lanes' firing) were most of it, moved on every call
//! (the pipeline's future: 4.9 KB before, 2.5 KB after).

use serde_json::{Map, Value};

use crate::core::fire::{decisions, fire, fire_entries, fire_entries_from};
use crate::core::hooks::{HookAction, HookEvent, HookPayload, LoopContext, LoopDecision, Point};
use crate::core::registry::Registry;

/// What the lanes before a tool call decided, combined.
#[derive(Debug)]
pub enum Before {
    /// The call goes on; `Some`: with these arguments, which a lane edited.
    Proceed(Option<Value>),
    /// The call is refused: `text` is its result, `reason` the block message.
    Refused {
        text: String,
        reason: String,
        terminate: bool,
        /// The hook that refused: `(plugin, label)`.
        by: Option<(String, String)>,
    },
    /// The call is refused with `text` and the turn ends after this batch.
    Aborted {
        reason: String,
        assistant_text: String,
        text: String,
    },
}

/// P9: the lanes dialects brought to the point, in their rows' order, each
/// shown the call as it came. Within a lane an abort outranks the first
/// refusal (a lane that stops at its first answer has at most one); a lane
/// that refused or aborted ends the point, and the lanes after it do not
/// fire. An edit of the arguments is what the call runs with (the last
/// lane's that made one). `context` makes a lane's context.
pub async fn before(
    registry: &Registry,
    arguments: &Value,
    context: impl Fn(HookEvent) -> LoopContext,
) -> Before {
    let mut lanes = registry.hooks().lanes_at(Point::ToolBefore);
    if !lanes.any(|(lane, _)| !is_request(lane)) {
        return Before::Proceed(None);
    }
    // Boxed: a call with no lane here keeps its future small (see the module docs).
    Box::pin(before_lanes(registry, arguments, context)).await
}

async fn before_lanes(
    registry: &Registry,
    arguments: &Value,
    context: impl Fn(HookEvent) -> LoopContext,
) -> Before {
    let budget = registry.hook_timeout;
    let mut edited = None;
    for (lane, entries) in registry.hooks().lanes_at(Point::ToolBefore) {
        // A request-editing lane ran before `tool_guard` (its own stage).
        if is_request(lane) {
            continue;
        }
        let mut lc = context(lane);
        let answers = fire_entries_from(entries, lane, HookPayload::Loop(&mut lc), budget).await;
        // A lane's policy leaves its refusal first (a veto lane's abort
        // outranks it); a lane that refused ends the point.
        let mut answers = answers.into_iter();
        if let Some((from, HookAction::Decide(decision))) = answers.next() {
            match decision {
                LoopDecision::AbortTurn {
                    reason,
                    assistant_text,
                    text,
                } => {
                    return Before::Aborted {
                        reason,
                        assistant_text,
                        text,
                    }
                }
                LoopDecision::Refuse {
                    text,
                    reason,
                    terminate,
                } => {
                    return Before::Refused {
                        text,
                        reason,
                        terminate,
                        by: entries
                            .get(from)
                            .map(|e| (e.owner.clone(), e.label.clone())),
                    }
                }
                _ => {}
            }
        }
        if &lc.tool_call.arguments != arguments {
            edited = Some(lc.tool_call.arguments);
        }
    }
    Before::Proceed(edited)
}

/// Whether `lane` is a request-editing lane of the point, which fires in
/// a stage of its own before the others ([`super::middleware::edits_request`]).
fn is_request(lane: HookEvent) -> bool {
    matches!(lane, HookEvent::Lane(id) if super::middleware::edits_request(id.lane()))
}

/// The request-editing lane of P9 that has subscriptions, if any.
fn request_lane(registry: &Registry) -> Option<(HookEvent, &[crate::core::hooks::HookEntry])> {
    super::middleware::request_lane(registry.hooks(), Point::ToolBefore)
        .map(|(lane, entries)| (HookEvent::Lane(crate::core::hooks::LaneId(lane)), entries))
}

/// The request-editing lane of P9 (a dialect's middleware over arguments):
/// the arguments as its chain left them (`None`: no callback, or none
/// changed them).
pub async fn request(
    registry: &Registry,
    arguments: &Value,
    context: impl FnOnce() -> LoopContext,
) -> Option<Value> {
    let (lane, entries) = request_lane(registry)?;
    Box::pin(request_chain(registry, (lane, entries), arguments, context)).await
}

async fn request_chain(
    registry: &Registry,
    (lane, entries): (HookEvent, &[crate::core::hooks::HookEntry]),
    arguments: &Value,
    context: impl FnOnce() -> LoopContext,
) -> Option<Value> {
    // The context already holds its own copy of the arguments.
    let mut lc = context();
    fire_entries(
        entries,
        lane,
        HookPayload::Loop(&mut lc),
        registry.hook_timeout,
    )
    .await;
    (&lc.tool_call.arguments != arguments).then_some(lc.tool_call.arguments)
}

/// P9x: immediately before the handler (an observer point).
pub async fn around(registry: &Registry, context: impl FnOnce() -> LoopContext) {
    if !registry
        .hooks()
        .entries(HookEvent::ToolExecuting)
        .is_empty()
    {
        Box::pin(async move {
            let mut lc = context();
            fire(
                registry,
                HookEvent::ToolExecuting,
                HookPayload::Loop(&mut lc),
            )
            .await;
        })
        .await;
    }
}

/// What the lanes after a tool call decided, combined.
#[derive(Debug, Default)]
pub struct After {
    /// The result the model sees.
    pub result: String,
    pub terminate: bool,
    pub short_circuit: Option<String>,
    pub abort: Option<(String, String)>,
    pub insert: Vec<Value>,
    /// A re-run asked for: `(arguments, delay_ms)`; `None` arguments: the same.
    pub rerun: Option<(Option<Map<String, Value>>, u64)>,
}

/// Whether any lane of the tool's loop points (P9, P9x, P10) has a
/// callback: without one, the call's arguments need not be copied for them.
pub fn any_hooked(registry: &Registry) -> bool {
    let hooks = registry.hooks();
    !hooks.entries(HookEvent::ToolExecuting).is_empty()
        || hooks.lanes_at(Point::ToolBefore).next().is_some()
        || after_hooked(registry)
}

/// Whether any lane of P10 has a callback (the pipeline builds no context otherwise).
pub fn after_hooked(registry: &Registry) -> bool {
    registry.hooks().lanes_at(Point::ToolAfter).next().is_some()
}

/// P10: the lanes dialects brought to the point, in their rows' order, on
/// one context: each sees the result as the lanes before it left it.
/// A merge lane's patch (its policy merged its callbacks' patches, a later
/// field winning: [`crate::core::fire`]) is applied after all its
/// callbacks ran; edits of the result chain; of the other decisions the
/// point keeps the first of each kind (a short-circuit, an abort, a
/// re-run) and every append.
///
/// Its caller looks first ([`after_hooked`]), as it has a context to make.
pub async fn after(registry: &Registry, mut lc: LoopContext) -> After {
    let budget = registry.hook_timeout;
    let mut after = After::default();
    for (lane, entries) in registry.hooks().lanes_at(Point::ToolAfter) {
        let answers = fire_entries(entries, lane, HookPayload::Loop(&mut lc), budget).await;
        let mut patch = None;
        for decision in decisions(answers, lane) {
            match decision {
                LoopDecision::Merge(merged) => patch = Some(merged),
                other => after.take(other),
            }
        }
        if let Some(patch) = patch {
            if let Some(Some(text)) = patch.result {
                lc.result = text;
            }
            after.terminate |= patch.terminate == Some(true);
        }
    }
    after.result = lc.result;
    after
}

impl After {
    /// One decision of a P10 lane folded in.
    fn take(&mut self, decision: LoopDecision) {
        match decision {
            LoopDecision::ShortCircuit(text) if self.short_circuit.is_none() => {
                self.short_circuit = Some(text)
            }
            LoopDecision::Terminate => self.terminate = true,
            LoopDecision::AbortTurn {
                reason,
                assistant_text,
                ..
            } if self.abort.is_none() => self.abort = Some((reason, assistant_text)),
            LoopDecision::Append(messages) => self.insert.extend(messages),
            LoopDecision::RerunTool {
                arguments,
                delay_ms,
            } if self.rerun.is_none() => self.rerun = Some((arguments, delay_ms)),
            _ => {}
        }
    }
}
