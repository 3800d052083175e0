//! Observers of what the loop did, for audit and metering (Felix's audit
//! and usage sinks): told of every tool call's outcome — a block included,
//! which no hook after the call sees — and of every model call's usage.
//!
//! Plain Rust, no Python. An observer only watches: it cannot change a
//! result, and whatever it does wrong is its own (an observer that fails
//! logs it; the call it watched has already ended as it ended).

use std::time::Duration;

use serde_json::{Map, Value};

use super::outcome::ToolResult;

/// One finished tool call, as the caller got it.
#[derive(Debug)]
pub struct ObservedToolCall<'a> {
    pub tool: &'a str,
    /// The plugin that registered the tool (`""` for a name no tool has).
    pub plugin: &'a str,
    pub session_id: &'a str,
    pub tool_call_id: &'a str,
    /// Whether a delegated (subagent) turn made the call.
    pub delegate: bool,
    pub result: &'a ToolResult,
    pub took: Duration,
    /// The hook that blocked the call, `(plugin, label)`, when one did.
    pub blocked_by: Option<(&'a str, &'a str)>,
}

/// One model call that answered, with the usage its provider reported.
#[derive(Debug)]
pub struct ObservedModelCall<'a> {
    pub model: &'a str,
    pub session_id: &'a str,
    /// The provider's usage object (`prompt_tokens`, `completion_tokens`, …).
    pub usage: &'a Map<String, Value>,
}

/// Something that watches calls. Both methods default to doing nothing.
pub trait CallObserver: Send + Sync + 'static {
    /// Who registered it, for logs.
    fn owner(&self) -> &str;
    fn tool_call(&self, _call: &ObservedToolCall<'_>) {}
    fn model_call(&self, _call: &ObservedModelCall<'_>) {}
}
