//! Where each Codumentor event fires: its loop point (spec §1.2), the
//! payload the seed names built from the point's context, and the
//! handler's answer turned into what the point executes (an edit of the
//! context, or a [`LoopDecision`]).
//!
//! Every `bus.on` subscription is its own callback on its point, so the
//! core runs them in `(priority, registration order)` with the hook budget
//! and reports their failures. Events sharing a point keep the seed's
//! order (`onContextReady` before `onAfterInput`, `onLLMCallEnd`,
//! `onUsageTracked`, `onAfterLLM`; `onToolInvokeEnd` before
//! `onAfterTool`): their priorities are offset by the event's rank. The
//! chain of one event at one point shares a state on the context (the
//! payload as the previous handler left it, extra keys included, and
//! whether `abort`/`defer` stopped it).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{json, Map, Value};

use super::payload::{edit_of, payload_of};
use super::turn::{Turn, TurnInfo};
use super::{installed, Decision};
use crate::core::hooks::{
    CallState, HookAction, HookError, HookEvent, HookPayload, HookReturn, LoopContext,
    LoopDecision, LoopEdit, TurnScope,
};
use crate::core::outcome::PluginError;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::value::to_json;
use crate::runtime::{plugin_error, try_attach};

/// The lanes of an in-scope event, each with its rank there, as its rows
/// say ([`super::lanes::EVENTS`]); none for another name.
pub fn points(event: &str) -> impl Iterator<Item = (HookEvent, i32)> + '_ {
    super::lanes::EVENTS
        .iter()
        .filter(move |r| r.name == event)
        .map(|r| (r.lane, r.rank))
}

/// The core priority of a subscription: after every other dialect's
/// callbacks at the point, the event's rank first, then its own priority
/// (lower first, D1).
pub fn core_priority(rank: i32, priority: i64) -> i32 {
    const SPAN: i64 = 1 << 24;
    let own = priority.clamp(-(SPAN / 2) + 1, SPAN / 2 - 1);
    (i64::from(i32::MAX) - (3 - i64::from(rank)) * SPAN + own) as i32
}

/// One handler of one event on one point.
pub struct Handler {
    pub home: PathBuf,
    pub event: String,
    /// The Python `Entry` (handler, plugin, label, priority).
    pub entry: Py<PyAny>,
}

/// The chain of one event at one point (on the point's context).
#[derive(Clone, Default)]
struct Chain(Arc<Mutex<ChainState>>);

#[derive(Default)]
struct ChainState {
    event: String,
    payload: Option<Map<String, Value>>,
    stopped: bool,
}

impl CallState for Chain {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The chain of one event at one point as plain data: what crosses to an
/// isolated plugin's worker and back, so its handlers and in-process ones
/// form one chain (each sees the payload the previous left, and `abort` /
/// `defer` stops the rest), whichever process they run in.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChainWire {
    pub event: String,
    pub payload: Option<Map<String, Value>>,
    pub stopped: bool,
}

/// Where an isolated handler's chain goes back to: the chain on the
/// point's context, shared with the in-process handlers that follow.
pub struct CarriedChain(Chain);

impl CarriedChain {
    /// Take over the chain as the isolated handler left it.
    pub fn store(&self, wire: ChainWire) {
        let mut state = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        state.event = wire.event;
        state.payload = wire.payload;
        state.stopped = wire.stopped;
    }
}

/// The chain on `lc` as data (`None` when no handler started one), and the
/// handle its update goes back through (the context gets an empty chain
/// when it had none, so in-process handlers after this one share it).
pub fn carried_chain(lc: &mut LoopContext) -> (Option<ChainWire>, CarriedChain) {
    if let Some(chain) = lc.dialect.get_mut::<Chain>() {
        let wire = {
            let state = chain.0.lock().unwrap_or_else(|e| e.into_inner());
            ChainWire {
                event: state.event.clone(),
                payload: state.payload.clone(),
                stopped: state.stopped,
            }
        };
        return (Some(wire), CarriedChain(chain.clone()));
    }
    let chain = Chain::default();
    lc.dialect.set(chain.clone());
    (None, CarriedChain(chain))
}

/// In a worker: put the chain plughost sent on the rebuilt context.
pub fn restore_chain(lc: &mut LoopContext, wire: ChainWire) {
    lc.dialect.set(Chain(Arc::new(Mutex::new(ChainState {
        event: wire.event,
        payload: wire.payload,
        stopped: wire.stopped,
    }))));
}

/// In a worker: the chain as the handler left it, for plughost.
pub fn chain_left(lc: &mut LoopContext) -> Option<ChainWire> {
    let chain = lc.dialect.get_mut::<Chain>()?;
    let state = chain.0.lock().unwrap_or_else(|e| e.into_inner());
    Some(ChainWire {
        event: state.event.clone(),
        payload: state.payload.clone(),
        stopped: state.stopped,
    })
}

/// The per-turn Python objects, in the turn's scope.
struct TurnSlot(Option<Turn>, Mutex<std::collections::HashSet<usize>>);

fn turn_objects(
    home: &std::path::Path,
    lc: &LoopContext,
) -> Option<(Py<PyAny>, Py<PyAny>, Arc<TurnScope>)> {
    let scope = lc.turn.clone()?;
    let slot = scope.slot(super::DIALECT.as_str(), || {
        TurnSlot(
            Turn::start(
                home,
                TurnInfo {
                    session_id: &lc.session_id,
                    user_id: "user",
                    channel: if lc.delegate { "delegate" } else { "cli" },
                    model: &lc.model,
                    kind: if lc.delegate { "subagent" } else { "main" },
                },
            ),
            Mutex::default(),
        )
    })?;
    let turn = slot.0.as_ref()?;
    if lc.iteration > 0 {
        turn.set_step(lc.iteration as u32);
    }
    let (agent, ctx) = turn.objects()?;
    Some((agent, ctx, scope))
}

impl Handler {
    /// Fire this handler on `core` with the point's context.
    pub fn call(&self, core: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let lc = match payload {
            HookPayload::Loop(lc) => lc,
            HookPayload::Session(sc) => return self.evict(&sc.session_id),
            _ => return HookReturn::Ready(Ok(HookAction::Continue)),
        };
        let _ = core;
        // The chain of this event on this context.
        let chain = match lc.dialect.get_mut::<Chain>() {
            Some(c) if c.0.lock().unwrap_or_else(|e| e.into_inner()).event == self.event => {
                c.clone()
            }
            _ => {
                let c = Chain::default();
                c.0.lock().unwrap_or_else(|e| e.into_inner()).event = self.event.clone();
                lc.dialect.set(c.clone());
                c
            }
        };
        let payload = {
            let state = chain.0.lock().unwrap_or_else(|e| e.into_inner());
            if state.stopped {
                return HookReturn::Ready(Ok(HookAction::Continue));
            }
            state.payload.clone()
        };
        let Some(payload) = payload.or_else(|| payload_of(&self.event, lc)) else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let detached = matches!(self.event.as_str(), "onServerReady");
        let objects = if detached {
            None
        } else {
            turn_objects(&self.home, lc)
        };
        let reply = lc.reply.clone();
        let iteration = lc.iteration;
        let event = self.event.clone();
        let started = try_attach(|py| -> PyResult<Awaited> {
            let module = installed(py)?.module.bind(py);
            let (agent, ctx) = match &objects {
                Some((a, c, _)) => (a.bind(py).clone(), c.bind(py).clone()),
                None => (py.None().into_bound(py), PyDict::new(py).into_any()),
            };
            let coro = module.getattr("step")?.call1((
                self.entry.bind(py),
                &event,
                agent,
                ctx,
                pythonize::pythonize(py, &payload)?,
                py.None(),
            ))?;
            Ok(bridge::resolve(py, coro))
        });
        let scope = objects.map(|(_, _, s)| s);
        let finish = move |r: PyResult<Py<PyAny>>| -> Result<HookAction, HookError> {
            try_attach(|py| match r {
                Ok(v) => answer(
                    py,
                    v.bind(py),
                    &event,
                    &chain,
                    &reply,
                    scope.as_deref(),
                    iteration,
                ),
                Err(e) => Err(HookError::Raised(plugin_error(py, &e))),
            })
            .unwrap_or_else(|e| Err(HookError::NotRun(e.to_string())))
        };
        match started {
            Ok(Ok(Awaited::Ready(r))) => HookReturn::Ready(finish(r)),
            Ok(Ok(Awaited::Pending(task))) => {
                HookReturn::Pending(Box::pin(async move { finish(task.await) }))
            }
            Ok(Err(e)) => HookReturn::Ready(finish(Err(e))),
            Err(e) => HookReturn::Ready(Err(HookError::NotRun(e.to_string()))),
        }
    }

    /// `onSessionEvict {session_id}`: agent `None`, ctx `{}`.
    fn evict(&self, session_id: &str) -> HookReturn {
        let mut payload = Map::new();
        payload.insert("session_id".into(), json!(session_id));
        let event = self.event.clone();
        let chain = Chain::default();
        let started = try_attach(|py| -> PyResult<Awaited> {
            let module = installed(py)?.module.bind(py);
            let coro = module.getattr("step")?.call1((
                self.entry.bind(py),
                &event,
                py.None(),
                PyDict::new(py),
                pythonize::pythonize(py, &payload)?,
                py.None(),
            ))?;
            Ok(bridge::resolve(py, coro))
        });
        let finish = move |r: PyResult<Py<PyAny>>| -> Result<HookAction, HookError> {
            try_attach(|py| match r {
                Ok(v) => answer(py, v.bind(py), &event, &chain, &Value::Null, None, 0)
                    .map(|_| HookAction::Continue),
                Err(e) => Err(HookError::Raised(plugin_error(py, &e))),
            })
            .unwrap_or_else(|e| Err(HookError::NotRun(e.to_string())))
        };
        match started {
            Ok(Ok(Awaited::Ready(r))) => HookReturn::Ready(finish(r)),
            Ok(Ok(Awaited::Pending(task))) => {
                HookReturn::Pending(Box::pin(async move { finish(task.await) }))
            }
            Ok(Err(e)) => HookReturn::Ready(finish(Err(e))),
            Err(e) => HookReturn::Ready(Err(HookError::NotRun(e.to_string()))),
        }
    }
}

/// What the Python `step` hands back: `(payload, decision, failure, stop)`.
type Stepped<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Option<(String, String, String, String, Bound<'py, PyAny>)>,
    bool,
);

/// A step's `(payload, decision, failure, stop)` as the point's answer.
fn answer(
    py: Python<'_>,
    v: &Bound<'_, PyAny>,
    event: &str,
    chain: &Chain,
    reply: &Value,
    scope: Option<&TurnScope>,
    iteration: usize,
) -> Result<HookAction, HookError> {
    if let Some(scope) = scope {
        drain_ui_events(py, scope);
    }
    let (payload, decision, failure, stop): Stepped<'_> = v
        .extract()
        .map_err(|e| HookError::Raised(plugin_error(py, &e)))?;
    let payload = match to_json(&payload) {
        Ok(Value::Object(m)) => m,
        _ => {
            return Err(HookError::Raised(PluginError::native(
                "the handler left a payload that is not a JSON object; the answer is ignored",
            )))
        }
    };
    {
        let mut state = chain.0.lock().unwrap_or_else(|e| e.into_inner());
        state.payload = Some(payload.clone());
        state.stopped |= stop;
    }
    if let Some((_, _, kind, message, exc)) = failure {
        return Err(if kind == "raised" && !exc.is_none() {
            HookError::Raised(plugin_error(py, &PyErr::from_value(exc)))
        } else {
            HookError::Raised(PluginError::native(message))
        });
    }
    if !decision.is_none() {
        let decision: Decision = to_json(&decision)
            .ok()
            .and_then(|d| serde_json::from_value(d).ok())
            .ok_or_else(|| HookError::raised("an unreadable decision"))?;
        return Ok(decided(decision, event, reply, scope, iteration));
    }
    Ok(match edit_of(event, &payload) {
        Some(edit) => HookAction::Decide(LoopDecision::Edit(edit)),
        None => HookAction::Continue,
    })
}

/// What a handler's typed decision asks of the point.
fn decided(
    decision: Decision,
    event: &str,
    reply: &Value,
    scope: Option<&TurnScope>,
    iteration: usize,
) -> HookAction {
    match decision {
        Decision::ShortCircuit { assistant_text, .. } => {
            HookAction::Decide(LoopDecision::ShortCircuit(assistant_text))
        }
        Decision::VetoTool { reason, .. } => HookAction::Decide(LoopDecision::Refuse {
            text: format!("[blocked: {reason}]"),
            reason,
            terminate: false,
        }),
        Decision::AbortTurn {
            reason,
            assistant_text,
            ..
        } => HookAction::Decide(LoopDecision::AbortTurn {
            text: format!("[blocked: {reason}]"),
            reason,
            assistant_text,
        }),
        Decision::ParamPatch { model, params, .. } => {
            let mut edits = vec![LoopEdit::Params(params)];
            edits.extend(model.map(LoopEdit::Model));
            HookAction::Decide(LoopDecision::Edit(LoopEdit::All(edits)))
        }
        // Onto the in-flight list: this call's (P6) and every later one.
        Decision::InsertStep { messages, .. } => HookAction::Decide(LoopDecision::Append(messages)),
        Decision::EnqueueTool { tool, args, .. } => {
            // Only a source of unique call ids (`enq_<n>`), not state: ids
            // unique across every host of the process are what the loop needs.
            static ENQUEUED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = ENQUEUED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let mut reply = reply.clone();
            let call = json!({"id": format!("enq_{n}"), "type": "function",
                "function": {"name": tool, "arguments": Value::Object(args).to_string()}});
            match reply.get_mut("tool_calls").and_then(Value::as_array_mut) {
                Some(calls) => calls.push(call),
                None => reply["tool_calls"] = json!([call]),
            }
            HookAction::Decide(LoopDecision::Edit(LoopEdit::Reply(reply)))
        }
        Decision::LlmRetry { .. } => {
            // "Request a single retry of the failed LLM call": once per call.
            let first = scope
                .and_then(|s| s.slot(super::DIALECT.as_str(), || TurnSlot(None, Mutex::default())))
                .is_some_and(|slot| {
                    slot.1
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(iteration)
                });
            if first {
                HookAction::Decide(LoopDecision::RetryModelCall { delay_ms: 0 })
            } else {
                HookAction::Continue
            }
        }
        Decision::RequeueTool { .. } => HookAction::Decide(LoopDecision::RerunTool {
            arguments: None,
            delay_ms: 0,
        }),
        Decision::RetryWith {
            patched_args,
            backoff_ms,
            ..
        } => HookAction::Decide(LoopDecision::RerunTool {
            arguments: Some(patched_args),
            delay_ms: backoff_ms,
        }),
        // `run` does not stream: onLLMStream never fires there.
        Decision::StreamControl { .. } => {
            tracing::warn!("{event}: {decision:?} is not supported by plughost yet; ignored");
            HookAction::Continue
        }
    }
}

fn drain_ui_events(py: Python<'_>, scope: &TurnScope) {
    let Some(slot) = scope.slot(super::DIALECT.as_str(), || TurnSlot(None, Mutex::default()))
    else {
        return;
    };
    let Some(turn) = slot.0.as_ref() else { return };
    let list = turn.ui_list(py);
    if let Ok(Value::Array(items)) = to_json(list.as_any()) {
        if !items.is_empty() {
            let _ = list.call_method0("clear");
            scope
                .ui_events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(items);
        }
    }
    let _: Option<Bound<'_, PyList>> = None;
}
