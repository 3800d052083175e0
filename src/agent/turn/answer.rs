//! The final answer of a turn: the answer point may continue the turn
//! instead ([`Point::AnswerReady`](crate::core::hooks::Point::AnswerReady));
//! else P11 may revise it, then it is stored (a revision included) and P12
//! sees what was stored.

use serde_json::{json, Value};

use super::Turn;
use crate::agent::Inner;
use crate::agent::ToolCallRecord;
use crate::core::hooks::{EndedBy, HookEvent, LoopContext, MAX_ANSWER_CONTINUATIONS};
use crate::core::loop_points as points;
use crate::core::outcome::ToolOutcome;

/// plughost's built-in tools that write a workspace file (its `path`
/// argument): what the answer point reports as the turn's changed files.
const FILE_WRITERS: &[&str] = &["write_file", "edit_file"];

/// The files the turn's built-in tools wrote or edited, sorted, each once.
fn changed_paths(calls: &[ToolCallRecord]) -> Vec<String> {
    let mut paths: Vec<String> = calls
        .iter()
        .filter(|c| FILE_WRITERS.contains(&c.name.as_str()) && c.outcome == ToolOutcome::Ok)
        .filter_map(|c| c.arguments.get("path")?.as_str().map(str::to_string))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

impl Inner {
    /// The answer point: the text a lane asked the turn to go on with;
    /// `None` once the turn was continued [`MAX_ANSWER_CONTINUATIONS`] times.
    pub(super) async fn answer_ready(
        &self,
        t: &Turn<'_>,
        text: &str,
        reply: &Value,
    ) -> Option<String> {
        if t.continued >= MAX_ANSWER_CONTINUATIONS {
            tracing::debug!(
                "session '{}': the turn was continued {MAX_ANSWER_CONTINUATIONS} times; its answer stands",
                t.session.key
            );
            return None;
        }
        let registry = self.host.registry();
        let context = || LoopContext {
            iteration: t.iteration,
            text: text.to_string(),
            reply: reply.clone(),
            attempt: t.continued,
            changed_paths: changed_paths(&t.report.tool_calls),
            ..self.loop_context(&t.session.key, t.delegate, t.turn)
        };
        points::answer_ready(&registry, context).await
    }

    /// The final answer `text` (`reply`: the assistant message to store,
    /// `null`: one made of `text`), ending the turn by `ended_by`.
    pub(super) async fn final_answer(
        &self,
        t: &mut Turn<'_>,
        (text, reply, ended_by): (String, Value, EndedBy),
    ) -> Result<(), String> {
        let registry = self.host.registry();
        let mut message = if reply.is_null() {
            json!({"role": "assistant", "content": text})
        } else {
            reply
        };
        let mut text = text;
        let context = || LoopContext {
            iteration: t.report.iterations,
            text: text.clone(),
            reply: message.clone(),
            ..self.loop_context(&t.session.key, t.delegate, t.turn)
        };
        if let Some(revised) = points::reply_before_send(&registry, &text, context).await {
            text = revised;
            message["content"] = json!(text);
        }
        t.record(message.clone())?;
        points::observe(&registry, HookEvent::ResponsePersisted, || LoopContext {
            iteration: t.report.iterations,
            text: text.clone(),
            reply: message,
            ..self.loop_context(&t.session.key, t.delegate, t.turn)
        })
        .await;
        t.report.reply = Some(text);
        t.report.ended_by = ended_by;
        Ok(())
    }
}
