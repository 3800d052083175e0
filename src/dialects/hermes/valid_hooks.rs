//! Hermes's hook names (`VALID_HOOKS` of the newest `hermes_cli/plugins.py`
//! read, plus the names its dispatcher bounds or fails closed on and the
//! older `pre_response_delivery`), and, for each one plughost's loop never
//! fires, why: `plugins doctor` prints the reason beside every such hook a
//! plugin registered. The names plughost fires are the core's
//! ([`crate::core::hooks::HookEvent`]); a test checks the two sets cover
//! the whole list.

/// Every Hermes hook name plughost knows of.
pub const VALID_HOOKS: &[&str] = &[
    "pre_tool_call",
    "post_tool_call",
    "transform_terminal_output",
    "transform_tool_result",
    "transform_llm_output",
    "pre_llm_call",
    "post_llm_call",
    "on_stream_start",
    "on_stream_delta",
    "on_stream_end",
    "on_interim_message",
    "pre_verify",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "transform_api_error_classification",
    "on_session_start",
    "on_session_end",
    "on_session_finalize",
    "on_session_reset",
    "on_skill_lifecycle",
    "subagent_start",
    "subagent_stop",
    "pre_gateway_dispatch",
    "agent_loop_stopped",
    "pre_approval_request",
    "post_approval_response",
    "on_room_member_activity",
    "pre_transcription",
    "kanban_task_claimed",
    "kanban_task_completed",
    "kanban_task_blocked",
    "on_kanban_worker_spawned",
    "on_kanban_worker_exited",
    "on_kanban_worker_stale_claim",
    "on_kanban_task_updated",
    "on_kanban_dispatch_tick",
    "gateway_platform_event",
    "pre_command",
    // In the dispatcher's bounded / fail-closed sets, not in VALID_HOOKS.
    "pre_auxiliary_call",
    "post_auxiliary_call",
    "pre_tts_synthesis",
    // v-mid's, dropped from the newest VALID_HOOKS.
    "pre_response_delivery",
];

const KANBAN: &str = "plughost has no Kanban board (Hermes's hermes_cli.kanban_db dispatcher and workers fire it): it never fires";

/// Why plughost never fires the Hermes hook `name`; `None` for the hooks
/// it fires and for names that are not Hermes's.
pub fn never_fires(name: &str) -> Option<&'static str> {
    Some(match name {
        "transform_api_error_classification" => {
            "plughost does not classify model API errors for failover (no provider failover): it never fires"
        }
        "on_skill_lifecycle" => {
            "plughost's skills have no lifecycle events (install, update, removal): it never fires"
        }
        "agent_loop_stopped" => {
            "plughost has no gateway /stop; an interrupted plughost turn does not fire it: it never fires"
        }
        "pre_approval_request" | "post_approval_response" => {
            "plughost has no human approval prompt, where Hermes fires its approval observers (the compat tools.approval refuses instead of asking): it never fires"
        }
        "on_room_member_activity" => "plughost hosts no Group Chat rooms: it never fires",
        "pre_transcription" => "plughost has no speech-to-text: it never fires",
        "kanban_task_claimed"
        | "kanban_task_completed"
        | "kanban_task_blocked"
        | "on_kanban_worker_spawned"
        | "on_kanban_worker_exited"
        | "on_kanban_worker_stale_claim"
        | "on_kanban_task_updated"
        | "on_kanban_dispatch_tick" => KANBAN,
        "pre_auxiliary_call" | "post_auxiliary_call" => {
            "plughost makes no auxiliary model calls (Hermes's side tasks: titles, compression): it never fires"
        }
        "pre_tts_synthesis" => "plughost has no text-to-speech: it never fires",
        "pre_response_delivery" => {
            "an older Hermes hook (not in the newest VALID_HOOKS); plughost has no delivery step: it never fires"
        }
        _ if name.starts_with("kanban_task_") || name.starts_with("on_kanban_") => KANBAN,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_hook_fires_or_has_a_reason() {
        for name in VALID_HOOKS {
            let fires = super::super::lanes::by_name(name).is_some();
            assert!(
                fires != never_fires(name).is_some(),
                "{name}: fires {fires}, reason {:?}",
                never_fires(name)
            );
        }
    }
}
