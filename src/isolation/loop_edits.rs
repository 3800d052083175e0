//! What a loop-point hook in a worker changed in its context, sent back as
//! the edit plughost applies to its own (issue 47): an in-process hook
//! edits the context in place (a Hermes memory provider appends its recall
//! to the user message, its block to the system prompt); in a worker that
//! edit happens to a copy, so the hook's "continue" crosses as the edit of
//! what it changed ([`LoopEdit`]), which plughost applies before the next
//! hook runs, as in-process. A hook that both edits and answers something
//! else keeps its answer (one answer per reply); its edits are dropped and
//! logged.

use serde_json::{Map, Value};

use crate::core::decisions::{LoopDecision, LoopEdit};
use crate::core::hooks::{HookAction, HookError, LoopContext};

/// The editable fields of a loop context before its hook ran.
pub(super) struct Snapshot {
    messages: Vec<Value>,
    text: String,
    result: String,
    reply: Value,
    model: String,
    params: Map<String, Value>,
    tools: Vec<Value>,
    /// The tool call's arguments (Hermes's `tool_request` middleware).
    arguments: Value,
}

impl Snapshot {
    pub(super) fn of(lc: &LoopContext) -> Snapshot {
        Snapshot {
            messages: lc.messages.clone(),
            text: lc.text.clone(),
            result: lc.result.clone(),
            reply: lc.reply.clone(),
            model: lc.model.clone(),
            params: lc.params.clone(),
            tools: lc.tools.clone(),
            arguments: lc.tool_call.arguments.clone(),
        }
    }

    /// The edit that makes the snapshot `lc` again; `None` when unchanged.
    fn edits(self, lc: &LoopContext) -> Option<LoopEdit> {
        let mut edits = Vec::new();
        if lc.messages != self.messages {
            edits.push(LoopEdit::Messages(lc.messages.clone()));
        }
        if lc.text != self.text {
            edits.push(LoopEdit::Text(lc.text.clone()));
        }
        if lc.result != self.result {
            edits.push(LoopEdit::Result(lc.result.clone()));
        }
        if lc.reply != self.reply {
            edits.push(LoopEdit::Reply(lc.reply.clone()));
        }
        if lc.model != self.model {
            edits.push(LoopEdit::Model(lc.model.clone()));
        }
        if lc.params != self.params {
            // Merged over plughost's: a removed key stays removed only
            // in-process (a worker's hook may add and change parameters).
            edits.push(LoopEdit::Params(lc.params.clone()));
        }
        if lc.tools != self.tools {
            edits.push(LoopEdit::Tools(lc.tools.clone()));
        }
        if lc.tool_call.arguments != self.arguments {
            edits.push(LoopEdit::Arguments(lc.tool_call.arguments.clone()));
        }
        match edits.len() {
            0 => None,
            1 => edits.pop(),
            _ => Some(LoopEdit::All(edits)),
        }
    }

    /// `answer`, a "continue" standing for the edits the hook made.
    pub(super) fn answer(
        self,
        lc: &LoopContext,
        answer: Result<HookAction, HookError>,
    ) -> Result<HookAction, HookError> {
        let Some(edit) = self.edits(lc) else {
            return answer;
        };
        match answer {
            Ok(HookAction::Continue) => Ok(HookAction::Decide(LoopDecision::Edit(edit))),
            other => {
                tracing::info!(
                    "a loop-point hook both changed its context and answered {other:?}: the answer is kept, the change dropped"
                );
                other
            }
        }
    }
}
