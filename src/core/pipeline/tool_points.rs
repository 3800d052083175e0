//! The loop points of a tool call (P9 before, P9x around, P10 after): each
//! fires its lanes in order and hands the pipeline one combined, typed
//! answer, so the pipeline's call sites are one line each.

use serde_json::{Map, Value};

use crate::core::fire::{decisions, fire, fire_entries};
use crate::core::hooks::{HookEvent, HookPayload, LoopContext, LoopDecision, ResultPatch};
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
    },
    /// The call is refused with `text` and the turn ends after this batch.
    Aborted {
        reason: String,
        assistant_text: String,
        text: String,
    },
}

/// P9: the first lane (`tool_before`) stops at its first refusal; the
/// second (`tool_vet`) runs every callback, an abort outranking the first
/// refusal; an edit of the arguments on it is what the call runs with.
/// `context` makes a lane's context (each lane sees the call as it came).
pub async fn before(
    registry: &Registry,
    arguments: &Value,
    context: impl Fn(HookEvent) -> LoopContext,
) -> Before {
    let hooks = registry.hooks();
    if !hooks.entries(HookEvent::ToolBefore).is_empty() {
        let mut lc = context(HookEvent::ToolBefore);
        let answers = fire(registry, HookEvent::ToolBefore, HookPayload::Loop(&mut lc)).await;
        for decision in decisions(answers, HookEvent::ToolBefore) {
            if let LoopDecision::Refuse {
                text,
                reason,
                terminate,
            } = decision
            {
                return Before::Refused {
                    text,
                    reason,
                    terminate,
                };
            }
        }
    }
    if hooks.entries(HookEvent::ToolVet).is_empty() {
        return Before::Proceed(None);
    }
    let mut lc = context(HookEvent::ToolVet);
    let answers = fire(registry, HookEvent::ToolVet, HookPayload::Loop(&mut lc)).await;
    let mut refusal = None;
    for decision in decisions(answers, HookEvent::ToolVet) {
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
            } if refusal.is_none() => {
                refusal = Some(Before::Refused {
                    text,
                    reason,
                    terminate,
                })
            }
            _ => {}
        }
    }
    refusal.unwrap_or_else(|| {
        let edited = lc.tool_call.arguments;
        Before::Proceed((&edited != arguments).then_some(edited))
    })
}

/// P9x: immediately before the handler (an observer point).
pub async fn around(registry: &Registry, context: impl FnOnce() -> LoopContext) {
    if !registry
        .hooks()
        .entries(HookEvent::ToolExecuting)
        .is_empty()
    {
        let mut lc = context();
        fire(
            registry,
            HookEvent::ToolExecuting,
            HookPayload::Loop(&mut lc),
        )
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
    [
        HookEvent::ToolBefore,
        HookEvent::ToolVet,
        HookEvent::ToolExecuting,
    ]
    .iter()
    .any(|e| !hooks.entries(*e).is_empty())
        || after_hooked(registry)
}

/// Whether any lane of P10 has a callback (the pipeline builds no context otherwise).
pub fn after_hooked(registry: &Registry) -> bool {
    let hooks = registry.hooks();
    !hooks.entries(HookEvent::ToolAfter).is_empty()
        || !hooks.entries(HookEvent::ToolAfterChain).is_empty()
}

/// P10: the first lane (`tool_after`) shows every callback the tool's own
/// result and merges their patches, a later field winning; the second
/// (`tool_after_chain`) chains edits of the result and keeps the first of
/// each kind (a short-circuit, an abort, a re-run) and every append.
pub async fn after(registry: &Registry, mut lc: LoopContext) -> After {
    let hooks = registry.hooks();
    let budget = registry.hook_timeout;
    let mut after = After::default();
    let merge_lane = hooks.entries(HookEvent::ToolAfter);
    if !merge_lane.is_empty() {
        let payload = HookPayload::Loop(&mut lc);
        let answers = fire_entries(merge_lane, HookEvent::ToolAfter, payload, budget).await;
        let mut patch = ResultPatch::default();
        for decision in decisions(answers, HookEvent::ToolAfter) {
            if let LoopDecision::Merge(p) = decision {
                patch = patch.then(p);
            }
        }
        if let Some(Some(text)) = patch.result {
            lc.result = text;
        }
        after.terminate = patch.terminate == Some(true);
    }
    let chain_lane = hooks.entries(HookEvent::ToolAfterChain);
    if !chain_lane.is_empty() {
        let payload = HookPayload::Loop(&mut lc);
        let answers = fire_entries(chain_lane, HookEvent::ToolAfterChain, payload, budget).await;
        for decision in decisions(answers, HookEvent::ToolAfterChain) {
            after.take(decision);
        }
    }
    after.result = lc.result;
    after
}

impl After {
    /// One `tool_after_chain` decision folded in.
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
