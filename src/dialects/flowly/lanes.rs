//! Flowly's event rows: every hook event name a Flowly plugin registers
//! that fires in plughost, and the lane it fires on. Flowly brings no lane
//! of its own, and every one of its events fails open (a failing callback
//! is logged and counted; the event goes on).

use crate::core::hooks::{EventRow, HookEvent};

/// Flowly's events, in the order its API lists them.
pub static EVENTS: &[EventRow] = &[
    EventRow::open("pre_tool_call", HookEvent::ToolGuard),
    EventRow::open("post_tool_call", HookEvent::ToolDone),
    EventRow::open("transform_tool_result", HookEvent::ResultRewrite),
    EventRow::open("transform_terminal_output", HookEvent::ExecOutputRewrite),
    EventRow::open("pre_llm_call", HookEvent::PromptContext),
    EventRow::open("post_llm_call", HookEvent::ExchangeDone),
    EventRow::open("pre_api_request", HookEvent::RequestSending),
    EventRow::open("post_api_request", HookEvent::ResponseArrived),
    EventRow::open("on_session_start", HookEvent::SessionOpened),
    EventRow::open("on_session_end", HookEvent::TurnClosed),
    EventRow::open("on_session_finalize", HookEvent::SessionClosing),
    EventRow::open("on_session_reset", HookEvent::SessionCleared),
    EventRow::open("subagent_stop", HookEvent::SubagentDone),
    EventRow::open("pre_gateway_dispatch", HookEvent::InboundGate),
    EventRow::open("transform_llm_output", HookEvent::ReplyRewrite),
    EventRow::open("subagent_start", HookEvent::SubagentBegun),
    EventRow::open("api_request_error", HookEvent::RequestFailed),
];

/// The row of a Flowly event name that fires in plughost.
pub fn by_name(name: &str) -> Option<&'static EventRow> {
    EVENTS.iter().find(|r| r.name == name)
}

/// Flowly's name of `lane` (what its logs and errors say); the bus's
/// name for a lane no Flowly event fires on.
pub fn name_of(lane: HookEvent) -> &'static str {
    EventRow::name_among(EVENTS, lane)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of Flowly's events fires on a lane of its own, and Hermes
    /// names the same lanes as Flowly does.
    #[test]
    fn each_row_fires_on_a_lane_of_its_own() {
        for row in EVENTS {
            assert_eq!(by_name(name_of(row.lane)).map(|r| r.lane), Some(row.lane));
            if let Some(hermes) = crate::dialects::hermes::lanes::by_name(row.name) {
                assert_eq!(hermes.lane, row.lane, "{}", row.name);
            }
        }
    }
}
