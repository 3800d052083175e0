//! Flowly's event rows: every hook event name a Flowly plugin registers
//! that fires in plughost, and the lane it fires on. Flowly brings no lane
//! of its own, and every one of its events fails open (a failing callback
//! is logged and counted; the event goes on).

use crate::core::hooks::{EventRow, HookEvent};

/// Flowly's events, in the order its API lists them.
pub static EVENTS: &[EventRow] = &[
    EventRow::open("pre_tool_call", HookEvent::PreToolCall),
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
];

/// The row of a Flowly event name that fires in plughost.
pub fn by_name(name: &str) -> Option<&'static EventRow> {
    EVENTS.iter().find(|r| r.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row names the lane whose wire name is its own (the isolation
    /// protocol and the event reference print the lane's).
    #[test]
    fn each_row_names_its_own_lane() {
        for row in EVENTS {
            assert_eq!(row.lane.name(), row.name);
        }
        for row in crate::dialects::hermes::lanes::EVENTS {
            assert_eq!(row.lane.name(), row.name);
        }
    }
}
