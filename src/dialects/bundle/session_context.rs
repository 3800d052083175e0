//! A `SessionStart` hook's context in an isolated bundle's worker.
//!
//! In-process, what a `SessionStart` hook says for the model joins the
//! session's transcript through the host's inbox of injected messages. A
//! worker has no host to queue it in, and the session's start is a point
//! that takes no answers; so the worker keeps the text per session
//! ([`Pending`]) and hands it over at the next point that can carry
//! messages: each turn's assembled history ([`Deliver`], before the
//! plugin's `UserPromptSubmit` hooks there, so the order is in-process's),
//! as messages appended to that turn's in-flight list. Those are not
//! written to the transcript, so it is handed over again at every turn of
//! the session: the model sees it for the whole session, as it does
//! in-process. A worker that restarts has lost it (its session does not
//! start again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::core::hooks::{
    HookAction, HookCallback, HookEvent, HookPayload, HookReturn, LoopDecision, LoopEdit,
};

/// The name the deliverer is registered by (a dialect callback, not a
/// Claude Code event).
pub const HOOK_NAME: &str = "session-context";

/// The texts `SessionStart` hooks of one plugin gave, per session.
#[derive(Default)]
pub struct Pending(Mutex<HashMap<String, Vec<String>>>);

impl Pending {
    /// Keep `texts` for `session`.
    pub fn add(&self, session: &str, texts: Vec<String>) {
        if texts.is_empty() {
            return;
        }
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(session.to_string())
            .or_default()
            .extend(texts);
    }

    /// What `session` was given, as user messages.
    fn messages(&self, session: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session)
            .map(|texts| {
                texts
                    .iter()
                    .map(|t| json!({"role": "user", "content": t}))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Appends a session's kept texts to each turn's in-flight list.
pub struct Deliver(pub Arc<Pending>);

impl HookCallback for Deliver {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let action = match payload {
            HookPayload::Loop(lc) if !lc.delegate => {
                let messages = self.0.messages(&lc.session_id);
                if messages.is_empty() {
                    HookAction::Continue
                } else {
                    HookAction::Decide(LoopDecision::Edit(LoopEdit::Append(messages)))
                }
            }
            _ => HookAction::Continue,
        };
        HookReturn::Ready(Ok(action))
    }
}
