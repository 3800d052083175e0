//! The tool-call pipeline, as stages.
//!
//! Pipeline (the Flowly contract): lookup → JSON Schema validation →
//! `tool_guard` (first block wins) → P9 (the dialects' lanes) →
//! `requires_env` and `check_fn` → P9x → handler →
//! `exec_output_rewrite` → `tool_done` → `result_rewrite`
//! (first replacement wins) → P10 (the dialects' lanes).
//! Every callback of an event runs, each isolated: a failing one is logged
//! and counted, never propagated. Each stage that ends the call early
//! returns its result as the `Err` of a `Stage`.

mod execution;
pub mod middleware;
mod tool_points;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::core::fire::{fire_entries, fire_entries_from};
use crate::core::hooks::{
    HookAction, HookEntry, HookEvent, HookPayload, LoopContext, LoopToolCall, ToolCallContext,
    TurnScope,
};
use crate::core::outcome::{
    ArgumentProblem, PluginError, Renderer, ToolOutcome, ToolResult, Unavailability,
};
use crate::core::registry::{Registry, Tool, ToolReturn};
use crate::core::wrappers;
use tool_points::Before;

/// Run the whole pipeline for one call of `name` with `args`.
pub async fn call_tool(
    registry: &Registry,
    name: &str,
    args: Value,
    session_id: &str,
    tool_call_id: &str,
) -> ToolResult {
    let ids = Ids {
        name,
        session_id,
        tool_call_id,
        turn: None,
    };
    // The marks stay here: a call outside a turn has no use for them, and
    // handing them back would move them (and the result) once more.
    let mut marks = ToolMarks::default();
    run_and_rerun(registry, &ids, args, &mut marks).await
}

/// What the loop points of one tool call asked of the turn, beyond its result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolMarks {
    /// The call asks to end the turn after its batch (when every call does).
    pub terminate: bool,
    /// `(reason, assistant_text)`: end the turn after this batch.
    pub abort: Option<(String, String)>,
    /// End the loop with this answer after this batch.
    pub short_circuit: Option<String>,
    /// Messages for the in-flight list after this batch's results (never stored).
    pub insert: Vec<Value>,
    /// A fatal tool failed: the turn ends after this batch (Felix's `had_fatal`).
    pub fatal: bool,
    /// P10 asked for a re-run: `(arguments, delay_ms)`.
    rerun: Option<(Map<String, Value>, u64)>,
    /// The hook that blocked the call, `(plugin, label)`, for audit rows.
    pub blocked_by: Option<(String, String)>,
}

/// A tool call's result and its [`ToolMarks`].
#[derive(Clone, Debug)]
pub struct TurnToolResult {
    pub result: ToolResult,
    pub marks: ToolMarks,
}

/// [`call_tool`] within a turn: the tool loop points (P9, P9x, P10) see
/// `turn`, and their decisions come back as [`ToolMarks`].
pub async fn call_tool_in_turn(
    registry: &Registry,
    name: &str,
    args: Value,
    session_id: &str,
    tool_call_id: &str,
    turn: Option<(Arc<TurnScope>, bool)>,
) -> TurnToolResult {
    let ids = Ids {
        name,
        session_id,
        tool_call_id,
        turn,
    };
    let mut marks = ToolMarks::default();
    let result = run_and_rerun(registry, &ids, args, &mut marks).await;
    TurnToolResult { result, marks }
}

/// The pipeline, then a re-run if its hooks asked for one; observed.
async fn run_and_rerun(
    registry: &Registry,
    ids: &Ids<'_>,
    args: Value,
    marks: &mut ToolMarks,
) -> ToolResult {
    let started = registry.observed().then(std::time::Instant::now);
    let mut result = pipeline(registry, ids, args, marks, false).await;
    // A re-run (Codumentor's `retry_with`, `requeue_tool`): its result, and
    // what its hooks decide, replace the first run's. Boxed: it is rare,
    // and its state would otherwise sit in every call's future.
    if let Some((arguments, delay_ms)) = marks.rerun.take() {
        let rerun = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let mut again = ToolMarks::default();
            let arguments = Value::Object(arguments);
            let result = pipeline(registry, ids, arguments, &mut again, true).await;
            (result, again)
        });
        let again;
        (result, again) = rerun.await;
        let first = std::mem::replace(marks, again);
        marks.insert.splice(0..0, first.insert);
    }
    if let Some(started) = started {
        let by = marks.blocked_by.as_ref();
        observe(registry, ids, &result, started.elapsed(), by);
    }
    result
}

/// Tell the registry's observers how the call ended.
fn observe(
    registry: &Registry,
    ids: &Ids<'_>,
    result: &ToolResult,
    took: Duration,
    blocked_by: Option<&(String, String)>,
) {
    let plugin = registry
        .tool(ids.name)
        .map(|t| t.spec.plugin.clone())
        .unwrap_or_default();
    registry.observe_tool_call(&crate::core::observers::ObservedToolCall {
        tool: ids.name,
        plugin: &plugin,
        session_id: ids.session_id,
        tool_call_id: ids.tool_call_id,
        delegate: ids.turn.as_ref().is_some_and(|(_, delegate)| *delegate),
        result,
        took,
        blocked_by: blocked_by.map(|(plugin, label)| (plugin.as_str(), label.as_str())),
    });
}

/// Who calls what, for every stage.
struct Ids<'a> {
    name: &'a str,
    session_id: &'a str,
    tool_call_id: &'a str,
    turn: Option<(Arc<TurnScope>, bool)>,
}

/// A stage's result: go on with `T`, or the call's result now.
type Stage<T> = Result<T, ToolResult>;

/// One call of a found tool.
struct Call<'a> {
    registry: &'a Registry,
    tool: &'a Tool,
    renderer: &'a dyn Renderer,
    ids: &'a Ids<'a>,
}

// `rerun`: this is a P10 re-run, which is never re-run again.
async fn pipeline(
    registry: &Registry,
    ids: &Ids<'_>,
    args: Value,
    marks: &mut ToolMarks,
    rerun: bool,
) -> ToolResult {
    let registered = registry.tool(ids.name);
    let runtime = registered
        .is_none()
        .then(|| registry.runtime_tool(ids.name))
        .flatten();
    let Some(tool) = registered.or(runtime.as_ref()) else {
        return ToolResult {
            text: registry.renderer().render(ids.name, &ToolOutcome::NotFound),
            outcome: ToolOutcome::NotFound,
        };
    };
    let call = Call {
        registry,
        tool,
        // A tool of a dialect with its own result strings renders its outcomes.
        renderer: tool.renderer.as_deref().unwrap_or(registry.renderer()),
        ids,
    };
    call.run(args, marks, rerun).await.unwrap_or_else(|r| r)
}

// A stage's `Err` is the call's result, moved out once: boxing it would
// cost an allocation on every early end for nothing.
#[allow(clippy::result_large_err)]
impl Call<'_> {
    async fn run(&self, args: Value, marks: &mut ToolMarks, rerun: bool) -> Stage<ToolResult> {
        let params = self.validate(self.object(args)?)?;
        let params = self.edit_request(params).await?;
        let mut ctx = self.tool_context(params);
        self.tool
            .handler
            .prepare(&mut ctx, self.tool, self.registry);
        self.tool_guard(&mut ctx, marks).await?;
        // What every loop point of the call is shown (P9's edits aside);
        // copied only when one of them has a callback (none reads it else).
        let mut arguments = if tool_points::any_hooked(self.registry) {
            Value::Object(ctx.params.clone())
        } else {
            Value::Null
        };
        self.before_points(&mut ctx, &arguments, marks).await?;
        self.available()?;
        tool_points::around(self.registry, || {
            self.loop_context(Some(HookEvent::ToolExecuting), &arguments)
        })
        .await;
        let (text, outcome) = self.wrapped_execute(&mut ctx, marks).await;
        let text = self.lanes_after_handler(&mut ctx, text, &outcome).await;
        let text = self
            .after_points(&mut ctx, &mut arguments, text, &outcome, marks, rerun)
            .await;
        Ok(ToolResult { text, outcome })
    }

    fn finish(&self, outcome: ToolOutcome) -> ToolResult {
        ToolResult {
            text: self.renderer.render(self.ids.name, &outcome),
            outcome,
        }
    }

    fn invalid(&self, problem: ArgumentProblem) -> ToolResult {
        self.finish(ToolOutcome::InvalidArguments { problem })
    }

    /// The arguments as an object (`null`: none).
    fn object(&self, args: Value) -> Stage<Map<String, Value>> {
        match args {
            Value::Object(map) => Ok(map),
            Value::Null => Ok(Map::new()),
            other => Err(self.invalid(ArgumentProblem::NotAnObject {
                got: json_type_name(&other),
            })),
        }
    }

    /// The tool's schema check (an unusable schema refuses every call).
    fn validate(&self, params: Map<String, Value>) -> Stage<Map<String, Value>> {
        if let Some(problem) = &self.tool.unusable_schema {
            return Err(self.invalid(ArgumentProblem::Schema {
                problem: problem.clone(),
            }));
        }
        let Some(validator) = self.tool.validator() else {
            return Ok(params);
        };
        let instance = Value::Object(params);
        if let Some(problem) = schema_problem(validator, &instance) {
            return Err(self.invalid(ArgumentProblem::Schema { problem }));
        }
        let Value::Object(map) = instance else {
            unreachable!("validated an object")
        };
        Ok(map)
    }

    fn tool_context(&self, params: Map<String, Value>) -> ToolCallContext {
        ToolCallContext {
            session_id: self.ids.session_id.to_string(),
            tool_name: self.ids.name.to_string(),
            params,
            tool_call_id: self.ids.tool_call_id.to_string(),
            delegate: self.ids.turn.as_ref().is_some_and(|(_, d)| *d),
            ..Default::default()
        }
    }

    /// A loop point's context for this call.
    /// A loop point's context of this call; `stage` is set again by each lane that fires.
    fn loop_context(&self, stage: Option<HookEvent>, arguments: &Value) -> LoopContext {
        let (turn, delegate) = self.ids.turn.clone().unzip();
        LoopContext {
            session_id: self.ids.session_id.to_string(),
            delegate: delegate.unwrap_or(false),
            tool_call: LoopToolCall {
                id: self.ids.tool_call_id.to_string(),
                name: self.ids.name.to_string(),
                arguments: arguments.clone(),
            },
            turn,
            stage,
            ..Default::default()
        }
    }

    /// `tool_guard`: the first block wins.
    async fn tool_guard(&self, ctx: &mut ToolCallContext, marks: &mut ToolMarks) -> Stage<()> {
        let pre = self.registry.hooks().entries(HookEvent::ToolGuard);
        if !any_for_tool(pre, self.ids.name) {
            return Ok(());
        }
        let budget = self.registry.hook_timeout;
        let payload = HookPayload::Tool(ctx);
        let actions = fire_entries_from(pre, HookEvent::ToolGuard, payload, budget).await;
        if let Some((from, HookAction::Block(message))) = actions.into_iter().next() {
            marks.blocked_by = pre.get(from).map(|e| (e.owner.clone(), e.label.clone()));
            return Err(self.finish(ToolOutcome::Blocked { message }));
        }
        // Hooks may have edited the arguments in place (Flowly semantics):
        // a handler that reads the Rust arguments gets the edited ones.
        if self.tool.handler.reads_rust_params() {
            if let Some(edited) = ctx.dialect.edited_params() {
                ctx.params = edited;
            }
        }
        Ok(())
    }

    /// P9: refused, aborted, or on with (possibly edited, validated again) arguments.
    async fn before_points(
        &self,
        ctx: &mut ToolCallContext,
        arguments: &Value,
        marks: &mut ToolMarks,
    ) -> Stage<()> {
        let before = tool_points::before(self.registry, arguments, |event| {
            self.loop_context(Some(event), arguments)
        });
        match before.await {
            Before::Proceed(None) => Ok(()),
            Before::Proceed(Some(edited)) => {
                ctx.params = self.revalidate(edited)?;
                Ok(())
            }
            Before::Refused {
                text,
                reason,
                terminate,
                by,
            } => {
                marks.terminate = terminate;
                marks.blocked_by = by;
                Err(blocked(text, reason))
            }
            Before::Aborted {
                reason,
                assistant_text,
                text,
            } => {
                marks.abort = Some((reason.clone(), assistant_text));
                Err(blocked(text, reason))
            }
        }
    }

    /// A variable the tool requires (`requires_env`) is unset: unavailable,
    /// naming it, whatever the dialect's own check would say; then `check_fn`.
    fn available(&self) -> Stage<()> {
        let tool = self.tool;
        if let Some(variable) = tool.spec.requires_env.iter().find(|v| !env_set(v)) {
            return Err(self.finish(ToolOutcome::Unavailable {
                reason: Unavailability::MissingEnv {
                    variable: variable.clone(),
                },
            }));
        }
        match tool.handler.check() {
            None | Some(Ok(true)) => Ok(()),
            Some(Ok(false)) => Err(self.finish(ToolOutcome::Unavailable {
                reason: tool.handler.unavailability(),
            })),
            Some(Err(error)) => Err(self.finish(ToolOutcome::CheckFailed { error })),
        }
    }

    /// The handler, timed (`ctx.duration_ms`); a failure rendered.
    /// The handler inside the [`TOOL_HANDLER`](crate::core::wrappers::TOOL_HANDLER) wrappers, if any.
    async fn wrapped_execute(
        &self,
        ctx: &mut ToolCallContext,
        marks: &mut ToolMarks,
    ) -> (String, ToolOutcome) {
        let entries = self.registry.hooks().wrappers(&wrappers::TOOL_HANDLER);
        if entries.is_empty() {
            return self.middleware_execute(ctx, marks).await;
        }
        let arguments = ctx.params.clone();
        let call = wrappers::Wrapped {
            session_id: self.ids.session_id,
            tool: self.ids.name,
            tool_call_id: self.ids.tool_call_id,
            arguments: &arguments,
        };
        let entered = wrappers::enter(entries, &call);
        let (text, outcome) = self.middleware_execute(ctx, marks).await;
        let result = wrappers::Unwrapped {
            text: &text,
            outcome: &outcome,
            duration_ms: ctx.duration_ms,
        };
        entered.exit(&call, &result);
        (text, outcome)
    }

    async fn execute(
        &self,
        ctx: &mut ToolCallContext,
        marks: &mut ToolMarks,
    ) -> (String, ToolOutcome) {
        let started = Instant::now();
        let returned = match self.tool.handler.call(ctx) {
            ToolReturn::Ready(r) => r,
            ToolReturn::Pending(fut) => fut.await,
        };
        ctx.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        match returned {
            Ok(text) => (text, ToolOutcome::Ok),
            Err(error) => {
                log_tool_failure(self.ids.name, &self.tool.spec.plugin, &error);
                marks.fatal = self.tool.handler.fatal(&error);
                let outcome = ToolOutcome::Raised { error };
                (self.renderer.render(self.ids.name, &outcome), outcome)
            }
        }
    }

    /// The own-payload lanes after the handler: `exec_output_rewrite`
    /// (terminal tools), `tool_done`, `result_rewrite`.
    async fn lanes_after_handler(
        &self,
        ctx: &mut ToolCallContext,
        mut text: String,
        outcome: &ToolOutcome,
    ) -> String {
        let hooks = self.registry.hooks();
        let budget = self.registry.hook_timeout;
        if self.tool.terminal {
            let terminal = hooks.entries(HookEvent::ExecOutputRewrite);
            if any_for_tool(terminal, self.ids.name) {
                let event = HookEvent::ExecOutputRewrite;
                text = transform_text(terminal, event, ctx, budget, text).await;
            }
        }
        let post = hooks.entries(HookEvent::ToolDone);
        let transform = hooks.entries(HookEvent::ResultRewrite);
        let (post_runs, transform_runs) = (
            any_for_tool(post, self.ids.name),
            any_for_tool(transform, self.ids.name),
        );
        if !post_runs && !transform_runs {
            return text;
        }
        ctx.success = Some(outcome.is_ok());
        if post_runs {
            ctx.result = Some(text);
            let payload = HookPayload::Tool(ctx);
            fire_entries(post, HookEvent::ToolDone, payload, budget).await;
            text = ctx.result.take().unwrap_or_default();
        }
        if transform_runs {
            let event = HookEvent::ResultRewrite;
            text = transform_text(transform, event, ctx, budget, text).await;
        }
        text
    }

    /// P10: the combined answer of the lanes after the call, into `marks`.
    // `ctx` is `&mut` only to be `Send` (a context is not `Sync`).
    async fn after_points(
        &self,
        ctx: &mut ToolCallContext,
        arguments: &mut Value,
        text: String,
        outcome: &ToolOutcome,
        marks: &mut ToolMarks,
        rerun: bool,
    ) -> String {
        if !tool_points::after_hooked(self.registry) {
            return text;
        }
        // The last context of the call: it takes the arguments themselves
        // (taken through a borrow: moved in, they would enlarge every
        // call's future).
        let mut lc = self.loop_context(None, &Value::Null);
        lc.tool_call.arguments = std::mem::take(arguments);
        lc.result = text;
        lc.is_error = !outcome.is_ok();
        lc.duration_ms = ctx.duration_ms;
        // Boxed: only a call with a lane here pays for this state (see
        // `tool_points`).
        let after = Box::pin(tool_points::after(self.registry, lc)).await;
        marks.terminate |= after.terminate;
        if marks.short_circuit.is_none() {
            marks.short_circuit = after.short_circuit;
        }
        if marks.abort.is_none() {
            marks.abort = after.abort;
        }
        marks.insert.extend(after.insert);
        match after.rerun {
            Some(_) if rerun => tracing::warn!(
                "{}: a re-run asked to run again; its result stands",
                self.ids.name
            ),
            Some((arguments, delay_ms)) => {
                let arguments = arguments.unwrap_or_else(|| ctx.params.clone());
                marks.rerun = Some((arguments, delay_ms));
            }
            None => {}
        }
        after.result
    }
}

/// Whether any callback of a tool event is for `tool` (the firing skips
/// the others, [`HookEntry::is_for_tool`]; nothing is copied per call).
fn any_for_tool(entries: &[HookEntry], tool: &str) -> bool {
    entries.iter().any(|e| e.is_for_tool(tool))
}

fn blocked(text: String, reason: String) -> ToolResult {
    ToolResult {
        text,
        outcome: ToolOutcome::Blocked { message: reason },
    }
}

/// Whether `name` is set to something non-empty (what `requires_env` asks).
fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// A plugin failure keeps its traceback: one line at warning level, the
/// traceback at `-v`.
fn log_tool_failure(tool: &str, plugin: &str, error: &PluginError) {
    tracing::warn!(
        "tool '{tool}' of plugin '{plugin}' raised {}",
        error.described()
    );
    if let Some(tb) = &error.traceback {
        tracing::info!("traceback of tool '{tool}':\n{}", tb.trim_end());
    }
}

/// Fire a `result_rewrite` and `exec_output_rewrite` event over `text` (shown to callbacks as
/// `ctx.result`): a replacement answer replaces it.
async fn transform_text(
    entries: &[HookEntry],
    event: HookEvent,
    ctx: &mut ToolCallContext,
    budget: Option<Duration>,
    text: String,
) -> String {
    ctx.result = Some(text);
    let answers = fire_entries(entries, event, HookPayload::Tool(ctx), budget).await;
    match answers.into_iter().next() {
        Some(HookAction::Replace(replaced)) => replaced,
        _ => ctx.result.take().unwrap_or_default(),
    }
}

fn schema_problem(validator: &jsonschema::Validator, instance: &Value) -> Option<String> {
    // The yes/no check first: it builds no error iterator (an allocation
    // and its bookkeeping on every call), and most calls are valid.
    if validator.is_valid(instance) {
        return None;
    }
    let error = validator.iter_errors(instance).next()?;
    let path = error.instance_path().to_string();
    Some(if path.is_empty() {
        error.to_string()
    } else {
        format!("{error} (at {path})")
    })
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's future holds the state of every stage inline, and is moved
    /// (from the wheel also allocated) on every call. The loop points'
    /// stages, which most hosts have no callback at, are boxed for that:
    /// with them inline the future was about 5 KB.
    #[test]
    fn a_tool_calls_future_stays_small() {
        let registry = Registry::new();
        let call = call_tool(&registry, "t", Value::Null, "", "");
        let size = std::mem::size_of_val(&call);
        assert!(size <= 3 * 1024, "a tool call's future is {size} bytes");
    }
}
