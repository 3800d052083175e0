//! The tool-call pipeline and the hook firing policies.
//!
//! Pipeline (the Flowly contract): lookup → JSON Schema validation →
//! `pre_tool_call` (first block wins) → `check_fn` → handler →
//! `post_tool_call` → `transform_tool_result` (first replacement wins).
//! Every callback of an event runs, each isolated: a failing one is logged
//! and counted, never propagated.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::core::hooks::{
    HookAction, HookEntry, HookError, HookEvent, HookPayload, HookReturn, LoopContext,
    LoopDecision, LoopToolCall, Policy, ToolCallContext, TurnScope,
};
pub use crate::core::outcome::{
    ArgumentProblem, PluginError, ToolOutcome, ToolResult, Unavailability,
};
use crate::core::registry::{Registry, ToolReturn};

/// Run the whole pipeline for one call of `name` with `args`.
pub async fn call_tool(
    registry: &Registry,
    name: &str,
    args: Value,
    session_id: &str,
    tool_call_id: &str,
) -> ToolResult {
    call_tool_in_turn(registry, name, args, session_id, tool_call_id, None)
        .await
        .result
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
    let mut marks = ToolMarks::default();
    let mut result = pipeline(
        registry,
        name,
        args,
        session_id,
        tool_call_id,
        turn.clone(),
        &mut marks,
        false,
    )
    .await;
    // A re-run (Codumentor's `retry_with`, `requeue_tool`): its result, and
    // what its hooks decide, replace the first run's.
    if let Some((arguments, delay_ms)) = marks.rerun.take() {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let mut again = ToolMarks::default();
        result = pipeline(
            registry,
            name,
            Value::Object(arguments),
            session_id,
            tool_call_id,
            turn,
            &mut again,
            true,
        )
        .await;
        again.insert.splice(0..0, std::mem::take(&mut marks.insert));
        marks = again;
    }
    TurnToolResult { result, marks }
}

// `rerun`: this is a P10 re-run, which is never re-run again.
#[allow(clippy::too_many_arguments)]
async fn pipeline(
    registry: &Registry,
    name: &str,
    args: Value,
    session_id: &str,
    tool_call_id: &str,
    turn: Option<(Arc<TurnScope>, bool)>,
    marks: &mut ToolMarks,
    rerun: bool,
) -> ToolResult {
    let registered = registry.tool(name);
    let runtime = registered
        .is_none()
        .then(|| registry.runtime_tool(name))
        .flatten();
    let Some(tool) = registered.or(runtime.as_ref()) else {
        return ToolResult {
            text: registry.renderer().render(name, &ToolOutcome::NotFound),
            outcome: ToolOutcome::NotFound,
        };
    };
    // A tool of a dialect with its own result strings renders its outcomes.
    let renderer = tool.renderer.as_deref().unwrap_or(registry.renderer());
    let finish = |outcome: ToolOutcome| ToolResult {
        text: renderer.render(name, &outcome),
        outcome,
    };
    let params = match args {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return finish(ToolOutcome::InvalidArguments {
                problem: ArgumentProblem::NotAnObject {
                    got: json_type_name(&other),
                },
            })
        }
    };
    if let Some(problem) = &tool.unusable_schema {
        return finish(ToolOutcome::InvalidArguments {
            problem: ArgumentProblem::Schema {
                problem: problem.clone(),
            },
        });
    }
    let params = match &tool.validator {
        None => params,
        Some(validator) => {
            let instance = Value::Object(params);
            if let Some(problem) = schema_problem(validator, &instance) {
                return finish(ToolOutcome::InvalidArguments {
                    problem: ArgumentProblem::Schema { problem },
                });
            }
            let Value::Object(map) = instance else {
                unreachable!("validated an object")
            };
            map
        }
    };
    let mut ctx = ToolCallContext {
        session_id: session_id.to_string(),
        tool_name: name.to_string(),
        params,
        tool_call_id: tool_call_id.to_string(),
        delegate: turn.as_ref().is_some_and(|(_, delegate)| *delegate),
        ..Default::default()
    };
    let hooks = registry.hooks();
    let budget = registry.hook_timeout;

    let pre = hooks.entries(HookEvent::PreToolCall);
    if !pre.is_empty() {
        let actions = fire_entries(
            pre,
            HookEvent::PreToolCall,
            HookPayload::Tool(&mut ctx),
            budget,
        )
        .await;
        if let Some(HookAction::Block(message)) = actions.into_iter().next() {
            return finish(ToolOutcome::Blocked { message });
        }
        // Hooks may have edited the arguments in place (Flowly semantics):
        // a handler that reads the Rust arguments gets the edited ones.
        if tool.handler.reads_rust_params() {
            if let Some(edited) = ctx.dialect.edited_params() {
                ctx.params = edited;
            }
        }
    }

    // P9: the loop points before the call (first lane stops at its first
    // refusal; second lane runs every callback, an abort outranking a refusal).
    let arguments = Value::Object(ctx.params.clone());
    let point = |event| {
        let (turn, delegate) = turn.clone().unzip();
        LoopContext {
            session_id: session_id.to_string(),
            delegate: delegate.unwrap_or(false),
            tool_call: LoopToolCall {
                id: tool_call_id.to_string(),
                name: name.to_string(),
                arguments: arguments.clone(),
            },
            turn,
            stage: Some(event),
            ..Default::default()
        }
    };
    if !hooks.entries(HookEvent::ToolBefore).is_empty() {
        let mut lc = point(HookEvent::ToolBefore);
        let answers = fire(registry, HookEvent::ToolBefore, HookPayload::Loop(&mut lc)).await;
        for decision in decisions(answers, HookEvent::ToolBefore) {
            if let LoopDecision::Refuse {
                text,
                reason,
                terminate,
            } = decision
            {
                marks.terminate = terminate;
                return ToolResult {
                    text,
                    outcome: ToolOutcome::Blocked { message: reason },
                };
            }
        }
    }
    if !hooks.entries(HookEvent::ToolVet).is_empty() {
        let mut lc = point(HookEvent::ToolVet);
        let answers = fire(registry, HookEvent::ToolVet, HookPayload::Loop(&mut lc)).await;
        let mut refusal = None;
        for decision in decisions(answers, HookEvent::ToolVet) {
            match decision {
                LoopDecision::AbortTurn {
                    reason,
                    assistant_text,
                    text,
                } => {
                    marks.abort = Some((reason.clone(), assistant_text));
                    return ToolResult {
                        text,
                        outcome: ToolOutcome::Blocked { message: reason },
                    };
                }
                LoopDecision::Refuse {
                    text,
                    reason,
                    terminate,
                } if refusal.is_none() => refusal = Some((text, reason, terminate)),
                _ => {}
            }
        }
        if let Some((text, reason, terminate)) = refusal {
            marks.terminate = terminate;
            return ToolResult {
                text,
                outcome: ToolOutcome::Blocked { message: reason },
            };
        }
        // Edited arguments: the call runs with them, validated again.
        if lc.tool_call.arguments != arguments {
            let edited = lc.tool_call.arguments;
            let Value::Object(params) = edited else {
                return finish(ToolOutcome::InvalidArguments {
                    problem: ArgumentProblem::NotAnObject {
                        got: json_type_name(&edited),
                    },
                });
            };
            if let Some(validator) = &tool.validator {
                let instance = Value::Object(params.clone());
                if let Some(problem) = schema_problem(validator, &instance) {
                    return finish(ToolOutcome::InvalidArguments {
                        problem: ArgumentProblem::Schema { problem },
                    });
                }
            }
            ctx.params = params;
        }
    }

    // A variable the tool requires (`requires_env`) is unset: unavailable,
    // naming it, whatever the dialect's own check would say.
    if let Some(variable) = tool.spec.requires_env.iter().find(|v| !env_set(v)) {
        return finish(ToolOutcome::Unavailable {
            reason: Unavailability::MissingEnv {
                variable: variable.clone(),
            },
        });
    }
    match tool.handler.check() {
        None | Some(Ok(true)) => {}
        Some(Ok(false)) => {
            return finish(ToolOutcome::Unavailable {
                reason: tool.handler.unavailability(),
            })
        }
        Some(Err(error)) => return finish(ToolOutcome::CheckFailed { error }),
    }

    if !hooks.entries(HookEvent::ToolExecuting).is_empty() {
        let mut lc = point(HookEvent::ToolExecuting);
        fire(
            registry,
            HookEvent::ToolExecuting,
            HookPayload::Loop(&mut lc),
        )
        .await;
    }

    let started = Instant::now();
    let returned = match tool.handler.call(&mut ctx) {
        ToolReturn::Ready(r) => r,
        ToolReturn::Pending(fut) => fut.await,
    };
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (mut text, outcome) = match returned {
        Ok(text) => (text, ToolOutcome::Ok),
        Err(error) => {
            log_tool_failure(name, &tool.spec.plugin, &error);
            marks.fatal = tool.handler.fatal(&error);
            let outcome = ToolOutcome::Raised { error };
            (renderer.render(name, &outcome), outcome)
        }
    };
    ctx.duration_ms = duration_ms;

    if tool.terminal {
        let terminal = hooks.entries(HookEvent::TransformTerminalOutput);
        if !terminal.is_empty() {
            text = transform_text(
                terminal,
                HookEvent::TransformTerminalOutput,
                &mut ctx,
                budget,
                text,
            )
            .await;
        }
    }

    let post = hooks.entries(HookEvent::PostToolCall);
    let transform = hooks.entries(HookEvent::TransformToolResult);
    if !post.is_empty() || !transform.is_empty() {
        ctx.success = Some(outcome.is_ok());
        if !post.is_empty() {
            ctx.result = Some(text);
            fire_entries(
                post,
                HookEvent::PostToolCall,
                HookPayload::Tool(&mut ctx),
                budget,
            )
            .await;
            text = ctx.result.take().unwrap_or_default();
        }
        if !transform.is_empty() {
            text = transform_text(
                transform,
                HookEvent::TransformToolResult,
                &mut ctx,
                budget,
                text,
            )
            .await;
        }
    }

    // P10: after the call ran (first lane merges answers over the tool's
    // own result; second lane chains edits of the result).
    let after = hooks.entries(HookEvent::ToolAfter);
    let after_chain = hooks.entries(HookEvent::ToolAfterChain);
    if !after.is_empty() || !after_chain.is_empty() {
        let mut lc = point(HookEvent::ToolAfter);
        lc.result = text;
        lc.is_error = !outcome.is_ok();
        lc.duration_ms = duration_ms;
        if !after.is_empty() {
            let answers = fire_entries(
                after,
                HookEvent::ToolAfter,
                HookPayload::Loop(&mut lc),
                budget,
            )
            .await;
            let mut merged = Map::new();
            for decision in decisions(answers, HookEvent::ToolAfter) {
                if let LoopDecision::Merge(map) = decision {
                    merged.extend(map);
                }
            }
            if let Some(content) = merged.get("content").and_then(Value::as_str) {
                lc.result = keep_failure_tag(&lc.result, content);
            }
            if merged.get("terminate").is_some_and(truthy) {
                marks.terminate = true;
            }
        }
        if !after_chain.is_empty() {
            let answers = fire_entries(
                after_chain,
                HookEvent::ToolAfterChain,
                HookPayload::Loop(&mut lc),
                budget,
            )
            .await;
            let mut again = None;
            for decision in decisions(answers, HookEvent::ToolAfterChain) {
                match decision {
                    LoopDecision::ShortCircuit(text) if marks.short_circuit.is_none() => {
                        marks.short_circuit = Some(text)
                    }
                    LoopDecision::Terminate => marks.terminate = true,
                    LoopDecision::AbortTurn {
                        reason,
                        assistant_text,
                        ..
                    } if marks.abort.is_none() => marks.abort = Some((reason, assistant_text)),
                    LoopDecision::Append(messages) => marks.insert.extend(messages),
                    LoopDecision::RerunTool {
                        arguments,
                        delay_ms,
                    } if again.is_none() => again = Some((arguments, delay_ms)),
                    _ => {}
                }
            }
            match again {
                Some(_) if rerun => {
                    tracing::warn!("{name}: a re-run asked to run again; its result stands")
                }
                Some((arguments, delay_ms)) => {
                    let arguments = arguments.unwrap_or_else(|| ctx.params.clone());
                    marks.rerun = Some((arguments, delay_ms));
                }
                None => {}
            }
        }
        text = lc.result;
    }
    ToolResult { text, outcome }
}

/// The [`LoopDecision`]s among `answers`; a decision the point cannot act
/// on is logged and dropped by the caller's match.
pub fn decisions(answers: Vec<HookAction>, event: HookEvent) -> Vec<LoopDecision> {
    answers
        .into_iter()
        .filter_map(|a| match a {
            HookAction::Decide(d) => Some(d),
            other => {
                tracing::warn!("{event}: ignored an answer it cannot act on: {other:?}");
                None
            }
        })
        .collect()
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The failure or refusal tag a result starts with (`[error/timeout]`,
/// `[tool error/…]`, `[policy …]`, `[fatal/…]`), if any.
pub fn failure_tag(text: &str) -> Option<&str> {
    let end = text.find(']')?;
    let inner = text.strip_prefix('[')?.get(..end - 1)?;
    ["error/", "tool error/", "policy ", "fatal/"]
        .iter()
        .any(|p| inner.starts_with(p))
        .then(|| &text[..=end])
}

/// A replacement of a tagged failure keeps the tag in front (Felix's rule:
/// the call still counts as a failure for the model and for eval).
pub fn keep_failure_tag(original: &str, replacement: &str) -> String {
    match failure_tag(original) {
        Some(tag) if failure_tag(replacement).is_none() => format!("{tag} {replacement}"),
        _ => replacement.to_string(),
    }
}

/// A plugin failure keeps its traceback: one line at warning level, the
/// traceback at `-v`.
/// Whether `name` is set to something non-empty (what `requires_env` asks).
fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

fn log_tool_failure(tool: &str, plugin: &str, error: &PluginError) {
    tracing::warn!(
        "tool '{tool}' of plugin '{plugin}' raised {}",
        error.described()
    );
    if let Some(tb) = &error.traceback {
        tracing::info!("traceback of tool '{tool}':\n{}", tb.trim_end());
    }
}

/// Fire `entries` for `event`, in order, each isolated, and return the
/// answers that count under the event's [policy](crate::core::hooks::HookSpec):
/// none for an observer, at most one for first-wins, all for collect, the
/// last for chain. A callback that raises, answers a shape the event does
/// not accept, or overruns the `budget` is logged and counted, never
/// propagated. This is the one firing function of the bus; dialects only
/// translate calls and answers.
pub async fn fire_entries(
    entries: &[HookEntry],
    event: HookEvent,
    mut payload: HookPayload<'_>,
    budget: Option<Duration>,
) -> Vec<HookAction> {
    let spec = event.spec();
    payload.set_stage(event);
    let mut answers = Vec::new();
    for entry in entries {
        entry
            .stats
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = budget.map(|_| Instant::now());
        let answer = match (entry.callback.call(event, payload.reborrow()), budget) {
            (HookReturn::Ready(r), None) => r,
            (HookReturn::Ready(r), Some(limit)) => {
                if started.is_some_and(|s| s.elapsed() > limit) {
                    Err(HookError::Overran(limit))
                } else {
                    r
                }
            }
            (HookReturn::Pending(fut), None) => fut.await,
            (HookReturn::Pending(fut), Some(limit)) => tokio::time::timeout(limit, fut)
                .await
                .unwrap_or(Err(HookError::TimedOut(limit))),
        };
        let answer = match answer {
            Ok(action) if action.kind().is_some_and(|k| !spec.accepts.contains(&k)) => {
                Err(HookError::WrongShape(format!("{action:?}"), event))
            }
            other => other,
        };
        let action = match answer {
            Ok(HookAction::Continue) => continue,
            // An edit of a loop point's context: applied now, so the next
            // callback sees it; not an answer under the policy.
            Ok(HookAction::Decide(crate::core::hooks::LoopDecision::Edit(edit))) => {
                if let HookPayload::Loop(ctx) = &mut payload {
                    edit.apply(ctx);
                }
                continue;
            }
            Ok(action) => action,
            Err(err) => {
                report_hook_error(entry, event, &err);
                record_turn_error(entry, event, &err);
                // A fail-closed event (or callback) takes any failure
                // (raised, wrong shape, timed out, not run) as a refusal.
                if answers.is_empty() {
                    let refusal = entry.callback.fail_closed(event, &err).or_else(|| {
                        (spec.on_error == crate::core::hooks::FailMode::Closed)
                            .then(|| fail_closed_answer(event, entry, &err))
                            .flatten()
                    });
                    if let Some(refusal) = refusal {
                        answers.push(refusal);
                    }
                }
                continue;
            }
        };
        match spec.policy {
            Policy::Observe => {} // it accepts no answer: refused above
            Policy::FirstWins => {
                if answers.is_empty() {
                    answers.push(action);
                }
            }
            Policy::Collect | Policy::Merge => answers.push(action),
            Policy::StopAtFirst => {
                answers.push(action);
                break;
            }
            Policy::Chain => {
                if let (HookAction::Replace(text), HookPayload::Tool(ctx)) = (&action, &mut payload)
                {
                    ctx.result = Some(text.clone());
                    ctx.revision += 1;
                }
                answers.clear();
                answers.push(action);
            }
        }
    }
    answers
}

/// The refusal a fail-closed event takes from a callback that failed.
fn fail_closed_answer(event: HookEvent, entry: &HookEntry, err: &HookError) -> Option<HookAction> {
    match event {
        HookEvent::PreToolCall => Some(HookAction::Block(format!(
            "hook {} of plugin '{}' failed: {err}",
            entry.label, entry.owner
        ))),
        HookEvent::PreGatewayDispatch => Some(HookAction::Skip(format!(
            "hook {} of plugin '{}' failed: {err}",
            entry.label, entry.owner
        ))),
        _ => None,
    }
}

/// Add a failed hook call to the current turn's `hook_errors` (when a turn
/// is running: see [`crate::core::hooks::CURRENT_TURN`]).
fn record_turn_error(entry: &HookEntry, event: HookEvent, err: &HookError) {
    let Some(turn) = crate::core::hooks::current_turn() else {
        return;
    };
    let error = match err {
        HookError::Raised(p) => p.described(),
        other => other.to_string(),
    };
    let record = crate::core::hooks::HookErrorRecord {
        plugin: entry.owner.clone(),
        dialect: String::new(),
        event: entry
            .callback
            .event_name(event)
            .unwrap_or_else(|| event.name().to_string()),
        handler: entry.label.clone(),
        error,
    };
    turn.hook_errors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(record);
}

fn report_hook_error(entry: &HookEntry, event: HookEvent, err: &HookError) {
    let first_of_kind = entry.stats.count(err);
    let line = format!(
        "hook {} callback {} of plugin '{}' failed: {}",
        event, entry.label, entry.owner, err
    );
    if first_of_kind || !matches!(err, HookError::WrongShape(..)) {
        tracing::warn!("{line}");
    } else {
        tracing::debug!("{line}");
    }
    if let HookError::Raised(PluginError {
        traceback: Some(tb),
        ..
    }) = err
    {
        tracing::info!(
            "traceback of hook {} of plugin '{}':\n{}",
            entry.label,
            entry.owner,
            tb.trim_end()
        );
    }
}

/// Fire `event` with `payload` under its policy; the answers that count.
pub async fn fire(
    registry: &Registry,
    event: HookEvent,
    payload: HookPayload<'_>,
) -> Vec<HookAction> {
    let entries = registry.hooks().entries(event);
    if entries.is_empty() {
        return Vec::new();
    }
    fire_entries(entries, event, payload, registry.hook_timeout).await
}

/// Fire P0 (`host_start`): the host starts serving. Call it once per
/// process, from the commands that serve (`run`, `chat`, `tools call`,
/// `commands run`).
pub async fn fire_host_start(registry: &Registry) {
    if registry.hooks().entries(HookEvent::HostStart).is_empty() {
        return;
    }
    let tools = registry.tools();
    let mut plugins: Vec<String> = tools
        .iter()
        .map(|t| t.spec.plugin.clone())
        .chain(registry.hooks().iter().map(|(_, h)| h.owner.clone()))
        .collect();
    plugins.sort();
    plugins.dedup();
    let mut lc = LoopContext {
        plugins,
        tools: tools
            .iter()
            .map(|t| serde_json::json!({"type": "function", "function": {"name": t.spec.name}}))
            .collect(),
        stage: Some(HookEvent::HostStart),
        ..Default::default()
    };
    fire(registry, HookEvent::HostStart, HookPayload::Loop(&mut lc)).await;
}

/// What `pre_gateway_dispatch` decided: the first skip or rewrite wins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatewayDecision {
    Deliver,
    Skip(String),
    Rewrite(String),
}

/// Fire `pre_gateway_dispatch` and apply its first-action-wins policy.
pub async fn fire_gateway(
    registry: &Registry,
    ctx: &mut crate::core::hooks::GatewayContext,
) -> GatewayDecision {
    let actions = fire(
        registry,
        HookEvent::PreGatewayDispatch,
        HookPayload::Gateway(ctx),
    )
    .await;
    for action in actions {
        match action {
            HookAction::Skip(reason) => return GatewayDecision::Skip(reason),
            HookAction::Rewrite(text) => return GatewayDecision::Rewrite(text),
            _ => {}
        }
    }
    GatewayDecision::Deliver
}

/// Fire `pre_llm_call` and collect the context strings to inject.
pub async fn fire_pre_llm(
    registry: &Registry,
    ctx: &mut crate::core::hooks::LlmCallContext,
) -> Vec<String> {
    fire(registry, HookEvent::PreLlmCall, HookPayload::Llm(ctx))
        .await
        .into_iter()
        .filter_map(|a| match a {
            HookAction::Inject(text) => Some(text),
            _ => None,
        })
        .collect()
}

/// Prepend injected context to a user message, the Flowly way:
/// `<plugin_context>\n…\n</plugin_context>\n\n<original>`.
pub fn inject_context(original: &str, contexts: &[String]) -> String {
    if contexts.is_empty() {
        return original.to_string();
    }
    format!(
        "<plugin_context>\n{}\n</plugin_context>\n\n{original}",
        contexts.join("\n\n")
    )
}

/// Fire a `transform_*` event over `text` (shown to callbacks as
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
