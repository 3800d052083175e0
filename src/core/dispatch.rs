//! The core's firing of the points outside the tool pipeline that need a
//! combined answer (`host_start`, `inbound_gate`, `prompt_context`),
//! and the paths callers have always used: the tool pipeline lives in
//! [`crate::core::pipeline`], the firing function in [`crate::core::fire`].

pub use crate::core::fire::{decisions, fire, fire_entries};
use crate::core::hooks::{HookAction, HookEvent, HookPayload, LoopContext};
pub use crate::core::outcome::{
    ArgumentProblem, PluginError, ToolOutcome, ToolResult, Unavailability,
};
pub use crate::core::pipeline::{call_tool, call_tool_in_turn, ToolMarks, TurnToolResult};
use crate::core::registry::Registry;

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

/// What `inbound_gate` decided: the first skip or rewrite wins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatewayDecision {
    Deliver,
    Skip(String),
    Rewrite(String),
}

/// Fire `inbound_gate` and apply its first-action-wins policy.
pub async fn fire_gateway(
    registry: &Registry,
    ctx: &mut crate::core::hooks::GatewayContext,
) -> GatewayDecision {
    let actions = fire(registry, HookEvent::InboundGate, HookPayload::Gateway(ctx)).await;
    for action in actions {
        match action {
            HookAction::Skip(reason) => return GatewayDecision::Skip(reason),
            HookAction::Rewrite(text) => return GatewayDecision::Rewrite(text),
            _ => {}
        }
    }
    GatewayDecision::Deliver
}

/// Fire `prompt_context` and collect the context strings to inject.
pub async fn fire_prompt_context(
    registry: &Registry,
    ctx: &mut crate::core::hooks::LlmCallContext,
) -> Vec<String> {
    fire(registry, HookEvent::PromptContext, HookPayload::Llm(ctx))
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
