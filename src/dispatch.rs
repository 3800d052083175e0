//! The tool-call pipeline and the hook firing policies.
//!
//! Pipeline (the Flowly contract): lookup → JSON Schema validation →
//! `pre_tool_call` (first block wins) → `check_fn` → handler →
//! `post_tool_call` → `transform_tool_result` (first replacement wins).
//! Every callback of an event runs, each isolated: a failing one is logged
//! and counted, never propagated.

use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::hooks::{
    HookAction, HookEntry, HookError, HookEvent, HookPayload, HookReturn, ToolCallContext,
};
use crate::registry::{Registry, ToolReturn};

/// How a tool call ended, as a caller (the CLI's exit code, a model loop)
/// needs to know it. The text is the contract; this is a convenience.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    Ok,
    Error,
    Blocked,
}

/// The result string of a tool call and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolResult {
    pub text: String,
    pub outcome: ToolOutcome,
}

impl ToolResult {
    fn error(text: String) -> ToolResult {
        ToolResult {
            text,
            outcome: ToolOutcome::Error,
        }
    }
    /// Classify a final result text: `Error…` is an error, `[blocked: …]` a block.
    pub fn classify(text: String) -> ToolResult {
        let outcome = if text.starts_with("Error") {
            ToolOutcome::Error
        } else if text.starts_with("[blocked: ") {
            ToolOutcome::Blocked
        } else {
            ToolOutcome::Ok
        };
        ToolResult { text, outcome }
    }
    pub fn is_ok(&self) -> bool {
        self.outcome == ToolOutcome::Ok
    }
}

/// Run the whole pipeline for one call of `name` with `args`.
pub async fn call_tool(
    registry: &Registry,
    name: &str,
    args: Value,
    session_id: &str,
    tool_call_id: &str,
) -> ToolResult {
    let Some(tool) = registry.tool(name) else {
        return ToolResult::error(format!("Error: Tool '{name}' not found"));
    };
    let params = match args {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return ToolResult::error(format!(
                "Error: arguments for {name} must be a JSON object, got {}",
                json_type_name(&other)
            ))
        }
    };
    if let Some(validator) = &tool.validator {
        let instance = Value::Object(params);
        if let Some(problem) = schema_problem(validator, &instance) {
            return ToolResult::error(format!("Error: invalid arguments for {name}: {problem}"));
        }
        let Value::Object(map) = instance else {
            unreachable!()
        };
        return run_validated(registry, tool, name, map, session_id, tool_call_id).await;
    }
    run_validated(registry, tool, name, params, session_id, tool_call_id).await
}

async fn run_validated(
    registry: &Registry,
    tool: &crate::registry::Tool,
    name: &str,
    params: Map<String, Value>,
    session_id: &str,
    tool_call_id: &str,
) -> ToolResult {
    let mut ctx = ToolCallContext {
        session_id: session_id.to_string(),
        tool_name: name.to_string(),
        params,
        tool_call_id: tool_call_id.to_string(),
        ..Default::default()
    };
    let hooks = registry.hooks();

    let pre = hooks.entries(HookEvent::PreToolCall);
    if !pre.is_empty() {
        let mut blocked = None;
        fire_entries(
            pre,
            HookEvent::PreToolCall,
            HookPayload::Tool(&mut ctx),
            registry.hook_timeout,
            |action| {
                if let HookAction::Block(message) = action {
                    blocked.get_or_insert(message);
                }
            },
        )
        .await;
        if let Some(message) = blocked {
            return ToolResult {
                text: format!("[blocked: {message}]"),
                outcome: ToolOutcome::Blocked,
            };
        }
    }

    match tool.handler.check() {
        None | Some(Ok(true)) => {}
        Some(Ok(false)) => {
            return ToolResult::error(format!(
                "Error: {name} is unavailable (plugin check_fn returned False)"
            ))
        }
        Some(Err(exc)) => {
            return ToolResult::error(format!("Error: {name} availability check failed: {exc}"))
        }
    }

    let started = Instant::now();
    let outcome = match tool.handler.call(&mut ctx) {
        ToolReturn::Ready(r) => r,
        ToolReturn::Pending(fut) => fut.await,
    };
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut text = match outcome {
        Ok(text) => text,
        Err(exc) => format!("Error executing {name}: {exc}"),
    };
    let timeout = registry.hook_timeout;

    if tool.terminal {
        let terminal = hooks.entries(HookEvent::TransformTerminalOutput);
        if !terminal.is_empty() {
            ctx.duration_ms = duration_ms;
            text = transform_text(
                terminal,
                HookEvent::TransformTerminalOutput,
                &mut ctx,
                timeout,
                text,
            )
            .await;
        }
    }

    let post = hooks.entries(HookEvent::PostToolCall);
    let transform = hooks.entries(HookEvent::TransformToolResult);
    if !post.is_empty() || !transform.is_empty() {
        ctx.success = Some(!text.starts_with("Error"));
        ctx.result = Some(text);
        ctx.duration_ms = duration_ms;
        if !post.is_empty() {
            fire_entries(
                post,
                HookEvent::PostToolCall,
                HookPayload::Tool(&mut ctx),
                timeout,
                |_| {},
            )
            .await;
        }
        text = ctx.result.take().unwrap_or_default();
        if !transform.is_empty() {
            text = transform_text(
                transform,
                HookEvent::TransformToolResult,
                &mut ctx,
                timeout,
                text,
            )
            .await;
        }
    }
    ToolResult::classify(text)
}

/// Fire `entries` for `event`, in order, handing every non-`Continue` action
/// to `on_action`. A failing callback is logged and counted; with a
/// `budget`, an async callback still running after it is cancelled and a
/// sync one that overran it has its action ignored (both counted).
pub async fn fire_entries(
    entries: &[HookEntry],
    event: HookEvent,
    mut payload: HookPayload<'_>,
    budget: Option<std::time::Duration>,
    mut on_action: impl FnMut(HookAction),
) {
    payload.set_stage(event);
    for entry in entries {
        entry
            .stats
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = budget.map(|_| Instant::now());
        let result = match (entry.callback.call(event, payload.reborrow()), budget) {
            (HookReturn::Ready(r), None) => r,
            (HookReturn::Ready(r), Some(limit)) => {
                if started.is_some_and(|s| s.elapsed() > limit) {
                    Err(HookError(format!(
                        "took longer than its {} s budget; its answer is ignored",
                        limit.as_secs_f64()
                    )))
                } else {
                    r
                }
            }
            (HookReturn::Pending(fut), None) => fut.await,
            (HookReturn::Pending(fut), Some(limit)) => match tokio::time::timeout(limit, fut).await
            {
                Ok(r) => r,
                Err(_) => Err(HookError(format!(
                    "timed out after {} s and was skipped",
                    limit.as_secs_f64()
                ))),
            },
        };
        match result {
            Ok(HookAction::Continue) => {}
            Ok(action) => on_action(action),
            Err(err) => report_hook_error(entry, event, &err),
        }
    }
}

fn report_hook_error(entry: &HookEntry, event: HookEvent, err: &HookError) {
    entry
        .stats
        .errors
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(
        "hook {} callback {} of plugin '{}' failed: {}",
        event,
        entry.label,
        entry.owner,
        err
    );
}

/// Fire an observation-only event (or collect its actions).
pub async fn fire(
    registry: &Registry,
    event: HookEvent,
    payload: HookPayload<'_>,
) -> Vec<HookAction> {
    let entries = registry.hooks().entries(event);
    let mut actions = Vec::new();
    if !entries.is_empty() {
        fire_entries(entries, event, payload, registry.hook_timeout, |a| {
            actions.push(a)
        })
        .await;
    }
    actions
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
    ctx: &mut crate::hooks::GatewayContext,
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
    ctx: &mut crate::hooks::LlmCallContext,
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
/// `ctx.result`): the first replacement a callback returns wins.
async fn transform_text(
    entries: &[HookEntry],
    event: HookEvent,
    ctx: &mut ToolCallContext,
    budget: Option<std::time::Duration>,
    text: String,
) -> String {
    ctx.result = Some(text);
    let mut replaced = None;
    fire_entries(entries, event, HookPayload::Tool(ctx), budget, |a| {
        if let HookAction::Replace(t) = a {
            replaced.get_or_insert(t);
        }
    })
    .await;
    replaced.unwrap_or_else(|| ctx.result.take().unwrap_or_default())
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
