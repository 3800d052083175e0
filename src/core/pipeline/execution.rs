//! The middleware stages of a tool call ([`middleware`]): a dialect's
//! request-editing lane before `tool_guard`, its around lane around the
//! handler.

use serde_json::{Map, Value};

use super::{json_type_name, middleware, schema_problem, tool_points, Call, Stage, ToolMarks};
use crate::core::hooks::{Point, ToolCallContext};
use crate::core::outcome::{ArgumentProblem, ToolOutcome};

// A stage's `Err` is the call's result (see the parent module).
#[allow(clippy::result_large_err)]
impl Call<'_> {
    /// The request-editing lane: the arguments every later stage sees
    /// (validated again when a middleware replaced them).
    pub(super) async fn edit_request(
        &self,
        params: Map<String, Value>,
    ) -> Stage<Map<String, Value>> {
        let arguments = Value::Object(params);
        let context = || self.loop_context(None, &arguments);
        match tool_points::request(self.registry, &arguments, context).await {
            None => match arguments {
                Value::Object(params) => Ok(params),
                _ => unreachable!("made from a map"),
            },
            Some(edited) => self.validate(self.object(edited)?),
        }
    }

    /// A loop-point lane's replacement of the arguments, checked against
    /// the tool's schema where it stands (not a copy of it), then taken.
    pub(super) fn revalidate(&self, edited: Value) -> Stage<Map<String, Value>> {
        if !edited.is_object() {
            return Err(self.invalid(ArgumentProblem::NotAnObject {
                got: json_type_name(&edited),
            }));
        }
        if let Some(validator) = self.tool.validator() {
            if let Some(problem) = schema_problem(validator, &edited) {
                return Err(self.invalid(ArgumentProblem::Schema { problem }));
            }
        }
        match edited {
            Value::Object(params) => Ok(params),
            _ => unreachable!("checked to be an object"),
        }
    }

    /// The handler inside the chain of the lane around it, if any
    /// ([`middleware::run_chain`]): run synchronously on this thread, as a
    /// sync Python hook is; the handler's own future is driven to its end
    /// by `next`.
    pub(super) async fn middleware_execute(
        &self,
        ctx: &mut ToolCallContext,
        marks: &mut ToolMarks,
    ) -> (String, ToolOutcome) {
        let Some((lane, entries)) =
            middleware::around_lane(self.registry.hooks(), Point::ToolAround)
        else {
            return self.execute(ctx, marks).await;
        };
        let call = middleware::ExecCall {
            kind: lane.name,
            session_id: self.ids.session_id.to_string(),
            tool: self.ids.name.to_string(),
            original: Value::Object(ctx.params.clone()),
        };
        let mut ran: Option<ToolOutcome> = None;
        let payload = call.original.clone();
        let result = {
            let mut terminal = |args: Value| {
                if let Value::Object(params) = args {
                    ctx.params = params;
                }
                // The tool's own future, driven here: an isolated
                // plugin's tool (or an async one) waits for its answer.
                let (text, outcome) = crate::core::wait::block_on(self.execute(ctx, marks));
                let failed = !matches!(outcome, ToolOutcome::Ok);
                ran = Some(outcome);
                if failed {
                    Err(middleware::ExecError::Downstream(text))
                } else {
                    Ok(Value::String(text))
                }
            };
            middleware::run_chain(entries, &call, payload, &mut terminal)
        };
        match (result, ran) {
            (Ok(Value::String(text)), Some(outcome)) => (text, outcome),
            (Ok(Value::String(text)), None) => (text, ToolOutcome::Ok),
            (Ok(other), outcome) => (other.to_string(), outcome.unwrap_or(ToolOutcome::Ok)),
            (Err(middleware::ExecError::Downstream(text)), Some(outcome)) => (text, outcome),
            (Err(e), _) => {
                let message = match e {
                    middleware::ExecError::Blocked { reason, .. } => reason,
                    middleware::ExecError::Failed(m) | middleware::ExecError::Downstream(m) => m,
                };
                let outcome = ToolOutcome::Blocked { message };
                (self.renderer.render(self.ids.name, &outcome), outcome)
            }
        }
    }
}
