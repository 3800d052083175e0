//! The final answer of a turn: P11 may revise it, then it is stored (a
//! revision included) and P12 sees what was stored.

use serde_json::{json, Value};

use super::Turn;
use crate::agent::Inner;
use crate::core::hooks::{EndedBy, HookEvent, LoopContext};
use crate::core::loop_points as points;

impl Inner {
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
