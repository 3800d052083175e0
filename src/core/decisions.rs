//! What a loop-point callback may answer: decisions and edits.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::core::contexts::LoopContext;

/// What a loop-point callback asks of the loop. Each point honours only the
/// decisions listed on it; any other is ignored with a warning (the point
/// cannot act on it).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, Serialize)]
pub enum LoopDecision {
    /// An edit of the point's context, applied before the next callback
    /// runs (so later callbacks see it: chaining), at any point whose
    /// context has that field. Edits are not answers: the point's policy
    /// counts only the other decisions.
    Edit(LoopEdit),
    /// P5, P6 and P10: append these
    /// messages to the in-flight list (carried to later iterations, never stored).
    Append(Vec<Value>),
    /// P9: refuse the call; `text` is the result the model sees, `reason`
    /// the block message; `terminate` marks the call (see [`LoopDecision::Terminate`]).
    Refuse {
        text: String,
        reason: String,
        terminate: bool,
    },
    /// P9: end the turn after this batch with `assistant_text`
    /// as the answer; outranks a refusal. The call itself is refused with `text`.
    AbortTurn {
        reason: String,
        assistant_text: String,
        text: String,
    },
    /// P4, P8, P10: end the loop with this text as the answer.
    ShortCircuit(String),
    /// P10 (a merge lane): a patch merged over earlier answers field by
    /// field, a later one winning; the merged patch's result replaces the
    /// call's and its `terminate` marks the call. The dialect that answers
    /// made the replacement text already (Felix keeps a failure's tag).
    Merge(ResultPatch),
    /// P10: mark the call; when every call of a batch
    /// is marked, the turn ends after it with the reply that carried them.
    Terminate,
    /// P7e: call the provider again after `delay_ms` (at most
    /// [`MAX_MODEL_RETRIES`](crate::core::contexts::MAX_MODEL_RETRIES) times per call).
    RetryModelCall { delay_ms: u64 },
    /// P2c: leave the transcript as it is.
    CancelCompaction,
    /// P2c: replace the dropped messages with this summary.
    Summary(String),
    /// P10: after `delay_ms`, run the call once more
    /// through the whole pipeline with `arguments` (`None`: the same ones);
    /// its result replaces this one. A re-run is never re-run again.
    RerunTool {
        arguments: Option<Map<String, Value>>,
        delay_ms: u64,
    },
    /// P2c: replace the whole transcript with these messages (a context
    /// engine's compaction: Hermes's `ContextEngine.compress` returns the
    /// new list, not a summary of a dropped part).
    ReplaceTranscript(Vec<Value>),
    /// The answer point ([`Point::AnswerReady`](crate::core::points::Point::AnswerReady)):
    /// do not end the turn yet. The model's answer is stored as an interim
    /// assistant message, this text joins as a user message, and the model
    /// is called again; at most
    /// [`MAX_ANSWER_CONTINUATIONS`](crate::core::contexts::MAX_ANSWER_CONTINUATIONS)
    /// times per turn, after which the point no longer fires.
    ContinueTurn(String),
}

/// The priority a dialect registers its loop-point callbacks at so that they
/// run before every prioritised dialect's at the same point (the spec's
/// cross-dialect order: Felix, then Codumentor); equal priorities keep
/// registration order.
pub const FIRST_LANE_PRIORITY: i32 = i32::MIN;

/// An edit of a [`LoopContext`] field (see [`LoopDecision::Edit`]).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, Serialize)]
pub enum LoopEdit {
    /// Replace [`LoopContext::messages`].
    Messages(Vec<Value>),
    /// Replace [`LoopContext::text`].
    Text(String),
    /// Replace [`LoopContext::result`].
    Result(String),
    /// Replace [`LoopContext::reply`].
    Reply(Value),
    /// Replace [`LoopContext::model`].
    Model(String),
    /// Merge into [`LoopContext::params`].
    Params(Map<String, Value>),
    /// Replace [`LoopContext::tools`] (what this call offers).
    Tools(Vec<Value>),
    /// Append to [`LoopContext::messages`].
    Append(Vec<Value>),
    /// Replace [`LoopContext::tool_call`]'s arguments (P9: the call runs
    /// with them, validated again).
    Arguments(Value),
    /// Several edits, in order (one answer that changes several fields).
    All(Vec<LoopEdit>),
}

impl LoopEdit {
    /// Apply the edit to `ctx`.
    pub fn apply(self, ctx: &mut LoopContext) {
        match self {
            LoopEdit::Messages(m) => ctx.messages = m,
            LoopEdit::Text(t) => ctx.text = t,
            LoopEdit::Result(r) => ctx.result = r,
            LoopEdit::Reply(r) => ctx.reply = r,
            LoopEdit::Model(m) => ctx.model = m,
            LoopEdit::Params(p) => ctx.params.extend(p),
            LoopEdit::Tools(t) => ctx.tools = t,
            LoopEdit::Append(m) => ctx.messages.extend(m),
            LoopEdit::Arguments(a) => ctx.tool_call.arguments = a,
            LoopEdit::All(edits) => {
                for edit in edits {
                    edit.apply(ctx);
                }
            }
        }
    }
}

/// What a merge lane's answer changes of a finished call (see
/// [`LoopDecision::Merge`]); `None` fields leave the earlier answers' value.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize, Serialize)]
pub struct ResultPatch {
    /// `Some(Some(text))`: the result becomes `text`; `Some(None)`: the
    /// answer named the result without a text, which undoes an earlier
    /// replacement.
    pub result: Option<Option<String>>,
    /// Whether the call asks to end the turn after its batch.
    pub terminate: Option<bool>,
}

impl ResultPatch {
    /// `later` merged over `self`, field by field.
    pub fn then(self, later: ResultPatch) -> ResultPatch {
        ResultPatch {
            result: later.result.or(self.result),
            terminate: later.terminate.or(self.terminate),
        }
    }
}
