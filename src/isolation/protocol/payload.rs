//! Hook contexts on the wire by event family, and rebuilding them in the worker.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::hooks::{
    GatewayContext, HookEvent, HookPayload, InboundMessage, LlmCallContext, LoopContext,
    SessionContext, SubagentStopContext, ToolCallContext,
};

/// The fields of a [`ToolCallContext`] a worker needs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ToolCallWire {
    pub session_id: String,
    pub task_id: String,
    pub tool_name: String,
    pub params: Map<String, Value>,
    pub tool_call_id: String,
    pub result: Option<String>,
    pub duration_ms: f64,
    pub success: Option<bool>,
    /// The call runs inside a `delegate` sub-agent (Felix's `manifest_id`).
    #[serde(default)]
    pub delegate: bool,
}

impl ToolCallWire {
    pub fn of(ctx: &ToolCallContext) -> ToolCallWire {
        ToolCallWire::with_params(ctx, ctx.params.clone())
    }

    /// `ctx`'s fields with `params` as the arguments (edits a hook made
    /// that the context does not hold), so they are not copied twice.
    pub fn with_params(ctx: &ToolCallContext, params: Map<String, Value>) -> ToolCallWire {
        ToolCallWire {
            session_id: ctx.session_id.clone(),
            task_id: ctx.task_id.clone(),
            tool_name: ctx.tool_name.clone(),
            params,
            tool_call_id: ctx.tool_call_id.clone(),
            result: ctx.result.clone(),
            duration_ms: ctx.duration_ms,
            success: ctx.success,
            delegate: ctx.delegate,
        }
    }

    pub fn into_context(self, stage: Option<HookEvent>) -> ToolCallContext {
        ToolCallContext {
            session_id: self.session_id,
            task_id: self.task_id,
            tool_name: self.tool_name,
            params: self.params,
            tool_call_id: self.tool_call_id,
            result: self.result,
            duration_ms: self.duration_ms,
            success: self.success,
            delegate: self.delegate,
            stage,
            ..Default::default()
        }
    }
}

/// [`InboundMessage`] on the wire.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct InboundWire {
    pub content: String,
    pub channel: String,
    pub sender_id: String,
    pub session_key: String,
    pub metadata: Map<String, Value>,
}

/// Any event of the bus by its name (`pre_tool_call`, the loop points'
/// `history_ready` and the dialects' lanes, `tool_before`).
pub fn event_named(name: &str) -> Option<HookEvent> {
    crate::dialects::event_by_name(name)
}

/// A [`LoopContext`] on the wire: its plain fields (its serde form). What
/// cannot cross as it is travels as data: the turn is its number (the
/// worker keeps its own per-turn state for it, Codumentor's `ctx` dict
/// among it), and the dialect's own state of the event being fired goes
/// there and back as an opaque value (`Isolated::carry_out`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LoopWire {
    /// The context, without its turn, stage and dialect state.
    pub context: LoopContext,
    /// plughost's number of the turn; `None` outside a turn.
    pub turn: Option<u64>,
    /// The dialect's per-turn state at this point (Codumentor's chain,
    /// when one was started), opaque here.
    pub chain: Option<Value>,
    /// The dialect's per-session state as the turn started (the stored
    /// value; `{}` for none), handed over once per turn and worker
    /// process: the worker's state of the session becomes exactly this,
    /// so a worker on another replica, a restarted one, or one whose
    /// session was started over (`/new`) goes on from what is stored.
    #[serde(default)]
    pub session_state: Option<Value>,
}

impl LoopWire {
    /// `lc`'s plain fields (turn and chain are the proxy's to fill).
    pub fn of(lc: &LoopContext) -> LoopWire {
        let mut context = lc.clone();
        // Not sent (nor kept alive by the request).
        context.turn = None;
        context.stage = None;
        LoopWire {
            context,
            turn: None,
            chain: None,
            session_state: None,
        }
    }

    /// The context rebuilt in the worker (without turn and chain, which
    /// the worker attaches from its own state).
    pub fn into_context(self, stage: Option<HookEvent>) -> LoopContext {
        LoopContext {
            stage,
            ..self.context
        }
    }
}

/// What a loop-point hook in a worker leaves besides its answer.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LoopAfter {
    /// The dialect's per-turn state as the handler left it.
    pub chain: Option<Value>,
    /// UI events it emitted (`ctx["ui_event_emitter"]`), for the turn's report.
    pub ui_events: Vec<Value>,
    /// The dialect's per-session state as the hook left it, when it
    /// changed since it last crossed (either way): plughost stores it with
    /// the session at the turn's end, as an in-process plugin's. Sent
    /// only by a worker that was handed the session's state
    /// ([`LoopWire::session_state`]), so a fresh process never reports a
    /// total counted from nothing.
    #[serde(default)]
    pub session_state: Option<Value>,
}

/// A hook's context on the wire, by event family.
#[derive(Debug, Serialize, Deserialize)]
pub enum PayloadWire {
    Loop(Box<LoopWire>),
    Tool(ToolCallWire),
    Llm {
        session_id: String,
        task_id: String,
        model: String,
        messages: Vec<Value>,
        tools: Vec<Value>,
        system: String,
        user_message: String,
        response: Value,
        assistant_message: String,
        usage: Map<String, Value>,
        truncated: bool,
        interrupted: bool,
    },
    Session {
        session_id: String,
        task_id: String,
        model: String,
        platform: String,
        completed: bool,
        interrupted: bool,
    },
    Subagent {
        session_id: String,
        task_id: String,
        subagent_id: String,
        reason: String,
        /// The sub-agent's task (`subagent_start`).
        #[serde(default)]
        goal: String,
    },
    Gateway {
        session_id: String,
        task_id: String,
        event: InboundWire,
        gateway: String,
    },
}

impl PayloadWire {
    /// The wire form of a payload as plughost holds it (a loop point's
    /// without its turn and chain, see [`LoopWire`]).
    pub fn of(payload: &HookPayload<'_>) -> PayloadWire {
        match payload {
            HookPayload::Tool(c) => PayloadWire::Tool(ToolCallWire::of(c)),
            HookPayload::Llm(c) => PayloadWire::Llm {
                session_id: c.session_id.clone(),
                task_id: c.task_id.clone(),
                model: c.model.clone(),
                messages: c.messages.clone(),
                tools: c.tools.clone(),
                system: c.system.clone(),
                user_message: c.user_message.clone(),
                response: c.response.clone(),
                assistant_message: c.assistant_message.clone(),
                usage: c.usage.clone(),
                truncated: c.truncated,
                interrupted: c.interrupted,
            },
            HookPayload::Session(c) => PayloadWire::Session {
                session_id: c.session_id.clone(),
                task_id: c.task_id.clone(),
                model: c.model.clone(),
                platform: c.platform.clone(),
                completed: c.completed,
                interrupted: c.interrupted,
            },
            HookPayload::Subagent(c) => PayloadWire::Subagent {
                session_id: c.session_id.clone(),
                task_id: c.task_id.clone(),
                subagent_id: c.subagent_id.clone(),
                reason: c.reason.clone(),
                goal: c.goal.clone(),
            },
            HookPayload::Gateway(c) => PayloadWire::Gateway {
                session_id: c.session_id.clone(),
                task_id: c.task_id.clone(),
                event: InboundWire {
                    content: c.event.content.clone(),
                    channel: c.event.channel.clone(),
                    sender_id: c.event.sender_id.clone(),
                    session_key: c.event.session_key.clone(),
                    metadata: c.event.metadata.clone(),
                },
                gateway: c.gateway.clone(),
            },
            HookPayload::Loop(lc) => PayloadWire::Loop(Box::new(LoopWire::of(lc))),
        }
    }
}

/// A payload rebuilt in the worker, owning its context.
pub enum OwnedPayload {
    Loop(Box<LoopContext>),
    Tool(ToolCallContext),
    Llm(LlmCallContext),
    Session(SessionContext),
    Subagent(SubagentStopContext),
    Gateway(GatewayContext),
}

impl OwnedPayload {
    pub fn from_wire(wire: PayloadWire, stage: HookEvent) -> OwnedPayload {
        let stage = Some(stage);
        match wire {
            PayloadWire::Loop(l) => OwnedPayload::Loop(Box::new(l.into_context(stage))),
            PayloadWire::Tool(t) => OwnedPayload::Tool(t.into_context(stage)),
            PayloadWire::Llm {
                session_id,
                task_id,
                model,
                messages,
                tools,
                system,
                user_message,
                response,
                assistant_message,
                usage,
                truncated,
                interrupted,
            } => OwnedPayload::Llm(LlmCallContext {
                session_id,
                task_id,
                model,
                messages,
                tools,
                system,
                user_message,
                response,
                assistant_message,
                usage,
                truncated,
                interrupted,
                stage,
                ..Default::default()
            }),
            PayloadWire::Session {
                session_id,
                task_id,
                model,
                platform,
                completed,
                interrupted,
            } => OwnedPayload::Session(SessionContext {
                session_id,
                task_id,
                model,
                platform,
                completed,
                interrupted,
                stage,
                ..Default::default()
            }),
            PayloadWire::Subagent {
                session_id,
                task_id,
                subagent_id,
                reason,
                goal,
            } => OwnedPayload::Subagent(SubagentStopContext {
                session_id,
                task_id,
                subagent_id,
                reason,
                goal,
                stage,
                ..Default::default()
            }),
            PayloadWire::Gateway {
                session_id,
                task_id,
                event,
                gateway,
            } => OwnedPayload::Gateway(GatewayContext {
                session_id,
                task_id,
                event: InboundMessage {
                    content: event.content,
                    channel: event.channel,
                    sender_id: event.sender_id,
                    session_key: event.session_key,
                    metadata: event.metadata,
                },
                gateway,
                stage,
                ..Default::default()
            }),
        }
    }

    /// The borrowed payload a callback is called with.
    pub fn as_payload(&mut self) -> HookPayload<'_> {
        match self {
            OwnedPayload::Loop(c) => HookPayload::Loop(c),
            OwnedPayload::Tool(c) => HookPayload::Tool(c),
            OwnedPayload::Llm(c) => HookPayload::Llm(c),
            OwnedPayload::Session(c) => HookPayload::Session(c),
            OwnedPayload::Subagent(c) => HookPayload::Subagent(c),
            OwnedPayload::Gateway(c) => HookPayload::Gateway(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hooks::LoopToolCall;
    use crate::isolation::protocol::{read_frame, write_frame};

    #[test]
    fn a_loop_context_crosses_with_every_plain_field() {
        let lc = LoopContext {
            session_id: "s".into(),
            delegate: true,
            iteration: 3,
            model: "m".into(),
            params: serde_json::json!({"temperature": 0.2})
                .as_object()
                .unwrap()
                .clone(),
            messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
            kept: vec![serde_json::json!({"role": "assistant", "content": "kept"})],
            tools: vec![serde_json::json!({"type": "function", "function": {"name": "t"}})],
            text: "text".into(),
            reply: serde_json::json!({"role": "assistant", "content": "r"}),
            stop_reason: "tool_calls".into(),
            usage: serde_json::json!({"total_tokens": 7})
                .as_object()
                .unwrap()
                .clone(),
            tool_call: LoopToolCall {
                id: "c1".into(),
                name: "t".into(),
                arguments: serde_json::json!({"a": 1}),
            },
            result: "result".into(),
            is_error: true,
            duration_ms: 1.5,
            error: Some("e".into()),
            ended_by: "aborted".into(),
            reason: Some("why".into()),
            plugins: vec!["p".into()],
            ..Default::default()
        };
        let mut wire = LoopWire::of(&lc);
        wire.turn = Some(9);
        wire.chain = Some(serde_json::json!({"stopped": true}));
        let mut buf = Vec::new();
        write_frame(&mut buf, &PayloadWire::Loop(Box::new(wire))).unwrap();
        let Some(PayloadWire::Loop(mut back)) = read_frame(&mut buf.as_slice()).unwrap() else {
            panic!("not a loop payload")
        };
        assert_eq!(back.turn.take(), Some(9));
        assert!(back.chain.take().is_some_and(|c| c["stopped"] == true));
        let got = back.into_context(Some(event_named("tool_vet").unwrap()));
        // Debug shows every field; turn, stage and dialect state aside, equal.
        let shown = |c: &LoopContext| {
            format!("{c:?}").replace("stage: Some(Lane(tool_vet))", "stage: None")
        };
        assert_eq!(shown(&got), shown(&lc));
    }
}
