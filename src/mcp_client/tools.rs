//! An MCP server's tools as registry tools: their names, and their calls
//! through the host's tool pipeline (hooks, argument validation against
//! the server's `inputSchema`, the turn's time limit, typed outcomes), and
//! what a `tools/call` answer reads as.
//!
//! Names follow Hermes (`tools/mcp_tool.py`): `mcp_<server>_<tool>`, each
//! part with every character outside `[A-Za-z0-9_]` replaced by `_`, in
//! the toolset `mcp-<server>`; a tool without a description gets
//! `MCP tool <tool> from <server>`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::server::Server;
use crate::core::contexts::ToolCallContext;
use crate::core::mcp::McpAnswer;
use crate::core::outcome::PluginError;
use crate::core::registry::{Tool, ToolHandler, ToolReturn, ToolSpec};

/// `value` with every character outside `[A-Za-z0-9_]` replaced by `_`
/// (Hermes's `sanitize_mcp_name_component`).
pub fn sanitize(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The registry name of `tool` of `server`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("mcp_{}_{}", sanitize(server), sanitize(tool))
}

/// Calls one tool of one server.
struct McpTool {
    server: Arc<Server>,
    tool: String,
    timeout: Duration,
    runtime: tokio::runtime::Handle,
}

impl ToolHandler for McpTool {
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let (server, tool, timeout) = (Arc::clone(&self.server), self.tool.clone(), self.timeout);
        let arguments = ctx.params.clone();
        // The connection lives on the host's MCP runtime; the caller's
        // runtime awaits the answer.
        let call = self
            .runtime
            .spawn(async move { server.call(&tool, arguments, timeout).await });
        ToolReturn::Pending(Box::pin(async move {
            match call.await {
                Ok(Ok(answer)) => model_text(answer),
                Ok(Err(e)) => Err(PluginError::native(e.to_string())),
                Err(e) => Err(PluginError::native(format!(
                    "the MCP call did not finish: the host's MCP client stopped ({e})"
                ))),
            }
        }))
    }
}

/// The registry tool for `listed`, a tool `server` offers.
pub fn registry_tool(
    server: &Arc<Server>,
    listed: &rmcp::model::Tool,
    runtime: &tokio::runtime::Handle,
) -> Tool {
    let name = &server.spec.name;
    let description = listed
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("MCP tool {} from {name}", listed.name));
    let mut parameters = Value::Object(listed.input_schema.as_ref().clone());
    if parameters.get("type").is_none() {
        parameters["type"] = Value::from("object");
    }
    let spec = ToolSpec {
        name: tool_name(name, &listed.name),
        description,
        parameters,
        plugin: server.spec.owner.clone(),
        toolset: format!("mcp-{name}"),
        requires_env: Vec::new(),
    };
    Tool::new(
        spec,
        Arc::new(McpTool {
            server: Arc::clone(server),
            tool: listed.name.to_string(),
            timeout: server.spec.timeout,
            runtime: runtime.clone(),
        }),
    )
}

/// What the model reads of an answer: its text (its `structuredContent`
/// as JSON when it has no text); a tool's `isError` is a failed call.
fn model_text(answer: McpAnswer) -> Result<String, PluginError> {
    if answer.is_error {
        let text = if answer.text.trim().is_empty() {
            "MCP tool returned an error".to_string()
        } else {
            answer.text
        };
        return Err(PluginError::native(text));
    }
    match (&answer.structured, answer.text.trim().is_empty()) {
        (Some(structured), true) => Ok(structured.to_string()),
        _ => Ok(answer.text),
    }
}

/// A `tools/call` result as plughost carries it: the text of its content
/// blocks (other blocks named in brackets), `structuredContent`, `isError`.
pub fn answer_of(result: rmcp::model::CallToolResult) -> McpAnswer {
    let parts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .filter_map(|block| block_text(&block))
        .collect();
    McpAnswer {
        text: parts.join("\n"),
        structured: result.structured_content,
        is_error: result.is_error.unwrap_or(false),
    }
}

/// One content block's text, read from its wire form (so every block type
/// of the protocol version reads the same way).
fn block_text(block: &Value) -> Option<String> {
    let field = |key: &str| block.get(key).and_then(Value::as_str);
    match field("type")? {
        "text" => field("text").map(str::to_string),
        "resource" => {
            let resource = block.get("resource").and_then(Value::as_object);
            let text = resource.and_then(|r| r.get("text")).and_then(Value::as_str);
            let uri = resource.and_then(|r| r.get("uri")).and_then(Value::as_str);
            Some(match text {
                Some(t) => t.to_string(),
                None => format!("[resource: {}]", uri.unwrap_or("?")),
            })
        }
        "resource_link" => Some(format!("[resource link: {}]", field("uri").unwrap_or("?"))),
        other => Some(format!(
            "[{other} content: {}]",
            field("mimeType").unwrap_or("unknown type")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_hermes_names() {
        assert_eq!(tool_name("my-srv", "do.it"), "mcp_my_srv_do_it");
        assert_eq!(tool_name("a", "b_c"), "mcp_a_b_c");
    }

    #[test]
    fn blocks_read_as_text() {
        assert_eq!(
            block_text(&json!({"type": "text", "text": "hi"})).as_deref(),
            Some("hi")
        );
        assert_eq!(
            block_text(&json!({"type": "image", "data": "..", "mimeType": "image/png"})).as_deref(),
            Some("[image content: image/png]")
        );
        let error = model_text(McpAnswer {
            text: String::new(),
            structured: None,
            is_error: true,
        });
        assert_eq!(error.unwrap_err().message, "MCP tool returned an error");
        let structured = model_text(McpAnswer {
            text: String::new(),
            structured: Some(json!({"n": 1})),
            is_error: false,
        });
        assert_eq!(structured.unwrap(), r#"{"n":1}"#);
    }
}
