//! Hermes's `pre_verify` on plughost's answer point
//! ([`Point::AnswerReady`](crate::core::hooks::Point::AnswerReady)), as
//! Hermes fires it (`agent/turn_stop_gates.py`, `hermes_cli/plugins.py`
//! `get_pre_verify_continue_message`): when the model's reply has no tool
//! calls and the turn edited files, with `session_id`, `platform`,
//! `model`, `coding`, `attempt`, `final_response` and `changed_paths`; an
//! answer `{"action": "continue", "message": …}` (or Claude Code's Stop
//! shape `{"decision": "block", "reason": …}`) with a non-empty message
//! keeps the turn going with that message, the first such answer winning;
//! any other answer lets the turn finish. The bound is the core's
//! [`MAX_ANSWER_CONTINUATIONS`](crate::core::hooks::MAX_ANSWER_CONTINUATIONS),
//! Hermes's default `agent.max_verify_nudges` (3).

use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::hooks::{HookAction, HookEvent, LaneId, LoopContext, LoopDecision};

/// Whether `event` is the `pre_verify` lane.
pub fn is_pre_verify(event: HookEvent) -> bool {
    event == HookEvent::Lane(LaneId(&super::lanes::PRE_VERIFY))
}

/// Whether Hermes would call `pre_verify` hooks at this answer: only after
/// the turn edited files (Hermes's default scope; `agent.pre_verify_always`
/// is not read).
pub fn fires(lc: &LoopContext) -> bool {
    !lc.changed_paths.is_empty()
}

/// Hermes's keywords of a `pre_verify` call.
pub fn kwargs(kw: &Bound<'_, PyDict>, lc: &LoopContext, platform: &str) -> PyResult<()> {
    kw.set_item("session_id", &lc.session_id)?;
    kw.set_item("platform", platform)?;
    kw.set_item("model", &lc.model)?;
    kw.set_item("coding", coding_context())?;
    kw.set_item("attempt", lc.attempt)?;
    kw.set_item("final_response", &lc.text)?;
    kw.set_item("changed_paths", lc.changed_paths.clone())?;
    Ok(())
}

/// Hermes's `coding` posture in its default `auto` mode for an
/// interactive surface (`agent/coding_context.py`): the current directory
/// is inside a git repository.
fn coding_context() -> bool {
    let Ok(cwd) = std::env::current_dir() else {
        return false;
    };
    cwd.ancestors()
        .any(|dir| Path::new(dir).join(".git").exists())
}

/// A `pre_verify` answer read as Hermes reads it: a continuation with its
/// message, or nothing.
pub fn answer(ret: &Bound<'_, PyAny>) -> HookAction {
    let Ok(d) = ret.cast::<PyDict>() else {
        return HookAction::Continue;
    };
    let field = |k: &str| {
        d.get_item(k)
            .ok()
            .flatten()
            .filter(|v| !v.is_none())
            .and_then(|v| v.extract::<String>().ok())
    };
    let action = field("action")
        .filter(|a| !a.is_empty())
        .or_else(|| field("decision"))
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if action != "continue" && action != "block" {
        return HookAction::Continue;
    }
    let message = field("message")
        .filter(|m| !m.is_empty())
        .or_else(|| field("reason"));
    match message.map(|m| m.trim().to_string()) {
        Some(m) if !m.is_empty() => HookAction::Decide(LoopDecision::ContinueTurn(m)),
        _ => HookAction::Continue,
    }
}
