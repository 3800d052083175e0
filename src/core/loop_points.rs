//! The loop points of a turn outside the tool pipeline: each fires its
//! lanes with the context the caller made and hands back the combined,
//! typed answer (an edited value, an append, a short-circuit, a retry …),
//! so the turn's call sites are one line each. A point without callbacks
//! costs one emptiness check: its context is made only when it fires.

use serde_json::{Map, Value};

use crate::core::fire::{decisions, fire, fire_entries};
use crate::core::hooks::{HookAction, HookEvent, HookPayload, LoopContext, LoopDecision, Point};
use crate::core::registry::Registry;

fn hooked(registry: &Registry, event: HookEvent) -> bool {
    !registry.hooks().entries(event).is_empty()
}

/// A context a callback can be shown: each event family's own type.
pub trait Shown: Send {
    fn payload(&mut self) -> HookPayload<'_>;
}

macro_rules! shown {
    ($($ty:ident => $variant:ident),*) => {$(
        impl Shown for crate::core::hooks::$ty {
            fn payload(&mut self) -> HookPayload<'_> {
                HookPayload::$variant(self)
            }
        }
    )*};
}

shown!(
    LoopContext => Loop,
    LlmCallContext => Llm,
    SessionContext => Session,
    SubagentStopContext => Subagent
);

/// Fire an observer lane (its answers are not used), with a context made
/// only when a callback listens. The context is made before the returned
/// future first waits, so `context` may borrow what a future sent to
/// another thread cannot hold.
pub fn observe<'a, C: Shown + 'a>(
    registry: &'a Registry,
    event: HookEvent,
    context: impl FnOnce() -> C,
) -> impl std::future::Future<Output = ()> + Send + 'a {
    let made = hooked(registry, event).then(context);
    async move {
        if let Some(mut c) = made {
            fire(registry, event, c.payload()).await;
        }
    }
}

/// Fire an observer lane with a context the caller keeps (what its
/// callbacks changed in it stays).
pub async fn observe_in<C: Shown>(registry: &Registry, event: HookEvent, context: &mut C) {
    if hooked(registry, event) {
        fire(registry, event, context.payload()).await;
    }
}

/// Fire a first-wins lane of the seed API whose answer replaces a text:
/// the first replacement.
/// The context is made as [`observe`] makes it.
pub fn replaced<'a, C: Shown + 'a>(
    registry: &'a Registry,
    event: HookEvent,
    context: impl FnOnce() -> C,
) -> impl std::future::Future<Output = Option<String>> + Send + 'a {
    let made = hooked(registry, event).then(context);
    async move {
        let mut c = made?;
        replacement(fire(registry, event, c.payload()).await)
    }
}

/// Fire a chain lane and return the context as its callbacks left it
/// (`None`: no callback, nothing changed).
pub async fn chain(
    registry: &Registry,
    event: HookEvent,
    context: impl FnOnce() -> LoopContext,
) -> Option<LoopContext> {
    if !hooked(registry, event) {
        return None;
    }
    let mut lc = context();
    fire(registry, event, HookPayload::Loop(&mut lc)).await;
    Some(lc)
}

/// The text of the first short-circuit among `decisions`.
fn short_circuit(decisions: Vec<LoopDecision>) -> Option<String> {
    decisions.into_iter().find_map(|d| match d {
        LoopDecision::ShortCircuit(text) => Some(text),
        _ => None,
    })
}

/// P4: the in-flight list as the callbacks left it, and a short-circuit.
pub async fn history_ready(
    registry: &Registry,
    messages: Vec<Value>,
    context: impl FnOnce() -> LoopContext,
) -> (Vec<Value>, Option<String>) {
    let event = HookEvent::HistoryReady;
    if !hooked(registry, event) {
        return (messages, None);
    }
    let mut lc = context();
    lc.messages = messages;
    let answers = fire(registry, event, HookPayload::Loop(&mut lc)).await;
    (lc.messages, short_circuit(decisions(answers, event)))
}

/// P5: the lanes dialects brought to the point, in their rows' order. Each
/// sees the in-flight list as the lanes before it left it; its callbacks'
/// edits chain (applied at once), its appends join the list after all of
/// them ran; both are carried to later iterations. `context(event,
/// messages)` makes a lane's context; the tools the last lane left, when
/// one fired.
pub async fn prompt_assembly(
    registry: &Registry,
    inflight: &mut Vec<Value>,
    context: impl Fn(HookEvent, Vec<Value>) -> LoopContext,
) -> Option<Vec<Value>> {
    let budget = registry.hook_timeout;
    let mut tools = None;
    for (lane, entries) in registry.hooks().lanes_at(Point::PromptAssembly) {
        let mut lc = context(lane, std::mem::take(inflight));
        let answers = fire_entries(entries, lane, HookPayload::Loop(&mut lc), budget).await;
        *inflight = std::mem::take(&mut lc.messages);
        for decision in decisions(answers, lane) {
            if let LoopDecision::Append(messages) = decision {
                inflight.extend(messages);
            }
        }
        tools = Some(lc.tools);
    }
    tools
}

/// P6: this call's list as the callbacks left it, then every append, which
/// also joins `inflight` (carried to later iterations).
pub async fn final_prompt(
    registry: &Registry,
    call_messages: Vec<Value>,
    inflight: &mut Vec<Value>,
    context: impl FnOnce(Vec<Value>) -> LoopContext,
) -> Vec<Value> {
    let event = HookEvent::PromptFinal;
    if !hooked(registry, event) {
        return call_messages;
    }
    let mut lc = context(call_messages);
    let answers = fire(registry, event, HookPayload::Loop(&mut lc)).await;
    let mut call_messages = lc.messages;
    for decision in decisions(answers, event) {
        if let LoopDecision::Append(messages) = decision {
            call_messages.extend(messages.iter().cloned());
            inflight.extend(messages);
        }
    }
    call_messages
}

/// P7: the model (`None`: unchanged) and parameters of this call, when a
/// callback is there to decide them.
pub async fn model_call_start(
    registry: &Registry,
    context: impl FnOnce() -> LoopContext,
) -> Option<(Option<String>, Map<String, Value>)> {
    let lc = chain(registry, HookEvent::ModelCallStart, context).await?;
    Some(((!lc.model.is_empty()).then_some(lc.model), lc.params))
}

/// P7e: the delay before the call is tried again, when a callback asks for it.
pub async fn model_error(
    registry: &Registry,
    context: impl FnOnce() -> LoopContext,
) -> Option<u64> {
    let event = HookEvent::ModelCallError;
    if !hooked(registry, event) {
        return None;
    }
    let mut lc = context();
    let answers = fire(registry, event, HookPayload::Loop(&mut lc)).await;
    decisions(answers, event).into_iter().find_map(|d| match d {
        LoopDecision::RetryModelCall { delay_ms } => Some(delay_ms),
        _ => None,
    })
}

/// What P8 decided about the model's reply.
#[derive(Debug)]
pub enum Replied {
    /// The reply stands as the model gave it.
    AsIs,
    /// The loop acts on this reply instead.
    Replaced(Value),
    /// The turn ends with this answer; the reply is discarded.
    ShortCircuit(String),
}

/// P8: the reply the loop records and acts on, tool calls included.
pub async fn model_replied(
    registry: &Registry,
    reply: &Value,
    context: impl FnOnce() -> LoopContext,
) -> Replied {
    let event = HookEvent::ModelReplied;
    if !hooked(registry, event) {
        return Replied::AsIs;
    }
    let mut lc = context();
    lc.reply = reply.clone();
    let answers = fire(registry, event, HookPayload::Loop(&mut lc)).await;
    if let Some(text) = short_circuit(decisions(answers, event)) {
        return Replied::ShortCircuit(text);
    }
    if &lc.reply != reply {
        Replied::Replaced(lc.reply)
    } else {
        Replied::AsIs
    }
}

/// P11: the answer as the callbacks revised it (`None`: unchanged).
pub async fn reply_before_send(
    registry: &Registry,
    text: &str,
    context: impl FnOnce() -> LoopContext,
) -> Option<String> {
    let lc = chain(registry, HookEvent::ResponseBeforeSend, context).await?;
    (lc.text != text).then_some(lc.text)
}

/// The answer point: the text a lane asked the turn to go on with, when
/// one did. The lanes dialects brought fire in their rows' order; the
/// first that answers [`LoopDecision::ContinueTurn`] with a non-empty
/// text decides, and the lanes after it do not fire this time (they fire
/// at the next answer). `context` is made once, when a lane has callbacks.
pub async fn answer_ready(
    registry: &Registry,
    context: impl FnOnce() -> LoopContext,
) -> Option<String> {
    let budget = registry.hook_timeout;
    let mut lanes = registry.hooks().lanes_at(Point::AnswerReady).peekable();
    lanes.peek()?;
    let mut lc = context();
    for (lane, entries) in lanes {
        let answers = fire_entries(entries, lane, HookPayload::Loop(&mut lc), budget).await;
        for decision in decisions(answers, lane) {
            match decision {
                LoopDecision::ContinueTurn(text) if !text.trim().is_empty() => return Some(text),
                LoopDecision::ContinueTurn(_) => {}
                other => tracing::warn!("{lane}: ignored {other:?}"),
            }
        }
    }
    None
}

/// What P2c decided about `/compact`.
#[derive(Debug, PartialEq)]
pub enum Compaction {
    Proceed,
    Cancel,
    /// Replace the dropped messages with this summary.
    Summary(String),
    /// Replace the whole transcript with these messages.
    Replace(Vec<Value>),
}

/// P2c: the first cancellation, summary or replacement stops the lane's answers.
pub async fn compact_before(
    registry: &Registry,
    context: impl FnOnce() -> LoopContext,
) -> Compaction {
    let event = HookEvent::CompactBefore;
    if !hooked(registry, event) {
        return Compaction::Proceed;
    }
    let mut lc = context();
    let answers = fire(registry, event, HookPayload::Loop(&mut lc)).await;
    for decision in decisions(answers, event) {
        match decision {
            LoopDecision::CancelCompaction => return Compaction::Cancel,
            LoopDecision::Summary(text) => return Compaction::Summary(text),
            LoopDecision::ReplaceTranscript(messages) => return Compaction::Replace(messages),
            other => tracing::warn!("compact_before: ignored {other:?}"),
        }
    }
    Compaction::Proceed
}

/// The first replacement among a seed lane's answers.
pub fn replacement(answers: Vec<HookAction>) -> Option<String> {
    answers.into_iter().find_map(|a| match a {
        HookAction::Replace(text) => Some(text),
        _ => None,
    })
}

/// Fire the dialects' observer lanes at `point` (one with no core lane:
/// a slash command, a stream observer's event, a platform event), each
/// callback shown `params` as its keywords; answers are not used. Costs
/// one emptiness check when nothing listens there.
pub async fn observe_lanes(
    registry: &Registry,
    point: Point,
    session_id: &str,
    params: Map<String, Value>,
) {
    if registry.hooks().lanes_at(point).next().is_none() {
        return;
    }
    let mut lc = LoopContext {
        session_id: session_id.to_string(),
        params,
        ..Default::default()
    };
    fire_lanes(registry, point, &mut lc).await;
}

/// Fire every dialect lane at `point` (one with no core lane) on `lc`, in
/// the lanes' order; what callbacks edit stays in `lc`.
pub async fn fire_lanes(registry: &Registry, point: Point, lc: &mut LoopContext) {
    for (lane, entries) in registry.hooks().lanes_at(point) {
        lc.stage = Some(lane);
        fire_entries(entries, lane, HookPayload::Loop(lc), registry.hook_timeout).await;
    }
}
