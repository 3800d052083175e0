//! A serving plugin's other parts across the worker protocol (issue 47
//! item 3): what an audit/usage sink is told of a call, and what an
//! authenticator answers.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::http::Bytes;
use crate::core::observers::{ObservedModelCall, ObservedToolCall};
use crate::core::outcome::{ArgumentProblem, PluginError, ToolOutcome, ToolResult, Unavailability};

/// A call a sink observes, as data.
#[derive(Debug, Serialize, Deserialize)]
pub enum ObservedWire {
    Tool {
        tool: String,
        plugin: String,
        session_id: String,
        tool_call_id: String,
        delegate: bool,
        text: String,
        outcome: OutcomeWire,
        took_ms: f64,
        blocked_by: Option<(String, String)>,
    },
    Model {
        model: String,
        session_id: String,
        usage: Map<String, Value>,
    },
}

/// A [`ToolOutcome`] on the wire: its kind exactly, its particulars as
/// text (a sink reads the kind, a block's message, a failure's error).
#[derive(Debug, Serialize, Deserialize)]
pub enum OutcomeWire {
    Ok,
    Raised(PluginError),
    Unavailable(String),
    CheckFailed(PluginError),
    Blocked(String),
    InvalidArguments(String),
    NotFound,
    TimedOut(std::time::Duration),
    Cancelled,
}

impl From<&ToolOutcome> for OutcomeWire {
    fn from(o: &ToolOutcome) -> OutcomeWire {
        match o {
            ToolOutcome::Ok => OutcomeWire::Ok,
            ToolOutcome::Raised { error } => OutcomeWire::Raised(error.clone()),
            ToolOutcome::Unavailable { reason } => OutcomeWire::Unavailable(text(reason)),
            ToolOutcome::CheckFailed { error } => OutcomeWire::CheckFailed(error.clone()),
            ToolOutcome::Blocked { message } => OutcomeWire::Blocked(message.clone()),
            ToolOutcome::InvalidArguments { problem } => {
                OutcomeWire::InvalidArguments(text(problem))
            }
            ToolOutcome::NotFound => OutcomeWire::NotFound,
            ToolOutcome::TimedOut { after } => OutcomeWire::TimedOut(*after),
            ToolOutcome::Cancelled => OutcomeWire::Cancelled,
        }
    }
}

/// What an unavailability or an argument problem says, as JSON text.
fn text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl From<OutcomeWire> for ToolOutcome {
    fn from(w: OutcomeWire) -> ToolOutcome {
        match w {
            OutcomeWire::Ok => ToolOutcome::Ok,
            OutcomeWire::Raised(error) => ToolOutcome::Raised { error },
            OutcomeWire::Unavailable(problem) => ToolOutcome::Unavailable {
                reason: Unavailability::Unmet { problem },
            },
            OutcomeWire::CheckFailed(error) => ToolOutcome::CheckFailed { error },
            OutcomeWire::Blocked(message) => ToolOutcome::Blocked { message },
            OutcomeWire::InvalidArguments(problem) => ToolOutcome::InvalidArguments {
                problem: ArgumentProblem::Schema { problem },
            },
            OutcomeWire::NotFound => ToolOutcome::NotFound,
            OutcomeWire::TimedOut(after) => ToolOutcome::TimedOut { after },
            OutcomeWire::Cancelled => ToolOutcome::Cancelled,
        }
    }
}

impl ObservedWire {
    pub fn of_tool(call: &ObservedToolCall<'_>) -> ObservedWire {
        ObservedWire::Tool {
            tool: call.tool.to_string(),
            plugin: call.plugin.to_string(),
            session_id: call.session_id.to_string(),
            tool_call_id: call.tool_call_id.to_string(),
            delegate: call.delegate,
            text: call.result.text.clone(),
            outcome: (&call.result.outcome).into(),
            took_ms: call.took.as_secs_f64() * 1000.0,
            blocked_by: call.blocked_by.map(|(p, l)| (p.to_string(), l.to_string())),
        }
    }

    pub fn of_model(call: &ObservedModelCall<'_>) -> ObservedWire {
        ObservedWire::Model {
            model: call.model.to_string(),
            session_id: call.session_id.to_string(),
            usage: call.usage.clone(),
        }
    }

    /// Tell `observer` of the call, as the host saw it.
    pub fn tell(self, observer: &dyn crate::core::observers::CallObserver) {
        match self {
            ObservedWire::Tool {
                tool,
                plugin,
                session_id,
                tool_call_id,
                delegate,
                text,
                outcome,
                took_ms,
                blocked_by,
            } => {
                let result = ToolResult {
                    text,
                    outcome: outcome.into(),
                };
                observer.tool_call(&ObservedToolCall {
                    tool: &tool,
                    plugin: &plugin,
                    session_id: &session_id,
                    tool_call_id: &tool_call_id,
                    delegate,
                    result: &result,
                    took: std::time::Duration::from_secs_f64(took_ms.max(0.0) / 1000.0),
                    blocked_by: blocked_by.as_ref().map(|(p, l)| (p.as_str(), l.as_str())),
                });
            }
            ObservedWire::Model {
                model,
                session_id,
                usage,
            } => observer.model_call(&ObservedModelCall {
                model: &model,
                session_id: &session_id,
                usage: &usage,
            }),
        }
    }
}

/// An authenticator's judgement on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub enum AuthWire {
    Accepted {
        subject: String,
    },
    /// Refused with this answer (its body collected).
    Refused {
        status: u16,
        headers: Vec<(Bytes, Bytes)>,
        body: Bytes,
    },
}
