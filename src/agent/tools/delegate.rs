//! The `delegate` tool: hands a sub-task to a sub-agent. Registered before
//! the agent exists, so the agent plugs itself in later through a
//! [`DelegateSlot`].

use std::sync::{Arc, OnceLock, Weak};

use serde_json::{json, Value};

use super::{spec, text_arg};
use crate::core::hooks::{BoxFuture, ToolCallContext};
use crate::core::registry::{Tool, ToolHandler, ToolReturn};

/// Runs a sub-agent for `delegate`; implemented by the agent loop.
pub trait SubagentRunner: Send + Sync + 'static {
    fn run(
        &self,
        parent_session: String,
        task: String,
        tools: Option<Vec<String>>,
    ) -> BoxFuture<Result<String, String>>;
}

/// Where the agent plugs itself into the `delegate` tool once it exists
/// (the tool is registered before the agent is built).
#[derive(Clone, Default)]
pub struct DelegateSlot(Arc<OnceLock<Weak<dyn SubagentRunner>>>);

impl DelegateSlot {
    pub fn connect(&self, runner: Weak<dyn SubagentRunner>) {
        let _ = self.0.set(runner);
    }
}

struct DelegateTool(DelegateSlot);

impl ToolHandler for DelegateTool {
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let task = match text_arg(&ctx.params, "task") {
            Ok(t) => t.to_string(),
            Err(e) => return ToolReturn::Ready(Err(e.into())),
        };
        let tools = ctx.params.get("tools").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        });
        let Some(runner) = self.0 .0.get().and_then(Weak::upgrade) else {
            return ToolReturn::Ready(Err(
                "delegate needs the agent loop (plughost run / chat)".into()
            ));
        };
        let run = runner.run(ctx.session_id.clone(), task, tools);
        ToolReturn::Pending(Box::pin(async move { run.await.map_err(Into::into) }))
    }
}

/// The `delegate` tool, connected to an agent later through `slot`.
pub fn delegate_tool(slot: &DelegateSlot) -> Tool {
    Tool::new(
        spec(
            "delegate",
            "Hand a self-contained sub-task to a sub-agent with its own session and a restricted tool set; returns its final answer.",
            json!({"type": "object", "properties": {
                "task": {"type": "string", "description": "What the sub-agent should do"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "Tools it may use (default: the file tools and exec)"}},
                "required": ["task"]}),
        ),
        Arc::new(DelegateTool(slot.clone())),
    )
}
