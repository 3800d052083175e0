//! Hermes's lanes and event rows: the hook names Hermes fires at a place
//! of the loop no core lane has, and every hook name it fires ([`EVENTS`]). `pre_command` observes a recognised slash command before
//! its handler runs (`hermes_cli/plugins.py`: "returns IGNORED in v1").

use crate::core::hooks::{EventRow, HookError, HookEvent, Lane, LaneId, Point, Policy};

/// `pre_command`: before a recognised slash command's handler, with
/// Hermes's keywords (`surface`, `command`, `alias_used`, `args_raw`,
/// `session_key`, `platform`); answers are ignored.
pub static PRE_COMMAND: Lane = Lane::plain(
    &PRE_COMMAND,
    "pre_command",
    Point::CommandBefore,
    1,
    Policy::Observe,
    "Before a recognised slash command's handler runs in the agent (`chat`, `run \"/name …\"`, `serve`): `command` is its canonical name, `alias_used` the alias typed (else `None`), `args_raw` the text after it. Answers are ignored, as in Hermes v1.",
);

/// Hermes's lanes, for the dialect table.
pub static LANES: &[&Lane] = &[&PRE_COMMAND];

/// Every hook name Hermes plugins register that fires in plughost, as its
/// row: the lane it fires on and how a failing callback counts. A failing
/// `pre_tool_call` callback blocks the call (Hermes's guards fail closed,
/// with its own messages); every other hook fails open.
pub static EVENTS: &[EventRow] = &[
    EventRow::closed(
        "pre_tool_call",
        HookEvent::PreToolCall,
        pre_tool_call_refused,
    ),
    EventRow::open("post_tool_call", HookEvent::PostToolCall),
    EventRow::open("transform_tool_result", HookEvent::TransformToolResult),
    EventRow::open(
        "transform_terminal_output",
        HookEvent::TransformTerminalOutput,
    ),
    EventRow::open("pre_llm_call", HookEvent::PreLlmCall),
    EventRow::open("post_llm_call", HookEvent::PostLlmCall),
    EventRow::open("pre_api_request", HookEvent::PreApiRequest),
    EventRow::open("post_api_request", HookEvent::PostApiRequest),
    EventRow::open("on_session_start", HookEvent::OnSessionStart),
    EventRow::open("on_session_end", HookEvent::OnSessionEnd),
    EventRow::open("on_session_finalize", HookEvent::OnSessionFinalize),
    EventRow::open("on_session_reset", HookEvent::OnSessionReset),
    EventRow::open("subagent_stop", HookEvent::SubagentStop),
    EventRow::open("pre_gateway_dispatch", HookEvent::PreGatewayDispatch),
    EventRow::open("transform_llm_output", HookEvent::TransformLlmOutput),
    EventRow::open("subagent_start", HookEvent::SubagentStart),
    EventRow::open("api_request_error", HookEvent::ApiRequestError),
    EventRow::open("pre_command", HookEvent::Lane(LaneId(&PRE_COMMAND))),
];

/// The row of a Hermes hook name that fires in plughost.
pub fn by_name(name: &str) -> Option<&'static EventRow> {
    EVENTS.iter().find(|r| r.name == name)
}

/// Hermes's reason for blocking a call whose `pre_tool_call` callback
/// `label` failed.
fn pre_tool_call_refused(label: &str, error: &HookError) -> String {
    match error {
        HookError::TimedOut(_) | HookError::Overran(_) => {
            "pre_tool_call plugin callback timed out or is still running".to_string()
        }
        HookError::Raised(e) => format!(
            "pre_tool_call plugin callback {label} raised {}",
            e.described()
        ),
        other => format!("pre_tool_call plugin callback {label} failed: {other}"),
    }
}
