//! The MCP server: the host's tools, skills and slash commands over the
//! official Rust SDK (`rmcp`), on stdio (`plughost mcp`) or streamable HTTP
//! (`/mcp` of `plughost serve`).
//!
//! - `tools/list`: every registered tool whose availability check passes
//!   (a failing `check_fn` or an unset `requires_env` variable hides it),
//!   with its description and argument JSON Schema.
//! - `tools/call`: [`super::call_tool`], the pipeline `plughost tools call`
//!   uses (hooks, validation, isolation) under the tool timeout; anything
//!   but a plain success is an `isError` result carrying plughost's text.
//! - `prompts/list` / `prompts/get`: each skill as a prompt named
//!   `plugin:name` whose one user message is its SKILL.md, and each slash
//!   command as a prompt named `/name` with an optional `args` argument;
//!   getting it runs the command and returns its reply as an assistant
//!   message (MCP clients show prompts as the user's slash commands).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult, ListToolsResult,
    PaginatedRequestParams, Prompt, PromptArgument, PromptMessage, Role, ServerCapabilities,
    ServerConfig, Tool as McpTool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use super::metrics::Metrics;
use crate::host::{CommandError, Host};

/// The session id tool calls and hooks see for MCP calls.
pub const MCP_SESSION: &str = "mcp";

/// One MCP server over a host; cheap to clone (one per HTTP session).
#[derive(Clone)]
pub struct PluginServer {
    host: Arc<Host>,
    tool_timeout: Duration,
    metrics: Option<Arc<Metrics>>,
    /// Tools registered by plughost itself (the agent's built-ins) are not
    /// plugin tools and are not served.
    hidden_owner: Option<&'static str>,
    /// The cluster whose idempotency records `tools/call` uses (`serve --sessions`).
    cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl PluginServer {
    /// A server for `host`'s tools; each call gives up after `tool_timeout`.
    pub fn new(host: Arc<Host>, tool_timeout: Duration) -> PluginServer {
        PluginServer {
            host,
            tool_timeout,
            metrics: None,
            hidden_owner: None,
            cluster: None,
        }
    }

    /// Honour an idempotency key in `tools/call`'s `_meta` through `cluster`
    /// ([`idempotent`]).
    pub fn with_cluster(mut self, cluster: Option<Arc<crate::cluster::Cluster>>) -> PluginServer {
        self.cluster = cluster;
        self
    }

    /// Count tool calls into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> PluginServer {
        self.metrics = Some(metrics);
        self
    }

    /// Do not serve the tools registered under `owner` (`serve` hides the
    /// agent's built-in workspace and exec tools, so `/mcp` offers what
    /// `plughost mcp` offers).
    pub fn hiding_owner(mut self, owner: &'static str) -> PluginServer {
        self.hidden_owner = Some(owner);
        self
    }

    fn served(&self, tool: &crate::core::registry::Tool) -> bool {
        self.hidden_owner != Some(tool.spec.plugin.as_str())
    }

    /// The tools listed now: registered, served, and available.
    pub fn tools(&self) -> Vec<McpTool> {
        self.host
            .registry()
            .tools()
            .into_iter()
            .filter(|t| self.served(t))
            .filter(|t| matches!(t.handler.check(), None | Some(Ok(true))))
            .map(|t| {
                let schema = match &t.spec.parameters {
                    Value::Object(map) if !map.is_empty() => map.clone(),
                    _ => {
                        let mut m = Map::new();
                        m.insert("type".into(), Value::String("object".into()));
                        m
                    }
                };
                McpTool::new(
                    t.spec.name.clone(),
                    t.spec.description.clone(),
                    Arc::new(schema),
                )
            })
            .collect()
    }

    /// Skills then slash commands, as prompts.
    pub fn prompts(&self) -> Vec<Prompt> {
        let registry = self.host.registry();
        let mut prompts: Vec<Prompt> = registry
            .skills()
            .into_iter()
            .map(|s| Prompt::new(s.name.clone(), Some(s.description.clone()), None))
            .collect();
        let table = crate::core::commands::CommandTable::new(&registry);
        let commands = table
            .listing(crate::core::commands::Surface::Mcp)
            .into_iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.description.into_owned(),
                    c.args_hint.to_string(),
                )
            });
        for (name, description, hint) in commands {
            let arg = PromptArgument::new("args")
                .with_description(if hint.is_empty() {
                    "The command's arguments (the text after the command name)".to_string()
                } else {
                    format!("The command's arguments: {hint}")
                })
                .with_required(false);
            prompts.push(Prompt::new(
                format!("/{name}"),
                Some(description),
                Some(vec![arg]),
            ));
        }
        prompts
    }

    /// A tool call as MCP answers it.
    pub async fn call(&self, name: &str, arguments: Option<Map<String, Value>>) -> CallToolResult {
        let started = Instant::now();
        let args = arguments
            .map(Value::Object)
            .unwrap_or(Value::Object(Map::new()));
        let hidden = self
            .host
            .registry()
            .tool(name)
            .is_some_and(|t| !self.served(t));
        let result = if hidden {
            super::refused(
                &self.host,
                name,
                crate::core::outcome::ToolOutcome::NotFound,
            )
        } else {
            super::call_tool(&self.host, name, args, MCP_SESSION, self.tool_timeout).await
        };
        if let Some(metrics) = &self.metrics {
            metrics.tool_call("mcp", result.outcome.kind(), started.elapsed());
        }
        let content = vec![ContentBlock::text(result.text.clone())];
        if result.is_ok() {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        }
    }

    /// `prompts/get`: a skill's SKILL.md, or a command's reply.
    pub async fn prompt(
        &self,
        name: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<GetPromptResult, ErrorData> {
        if let Some(command) = name.strip_prefix('/') {
            let args = arguments
                .and_then(|a| a.get("args"))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            let line = format!("/{command} {args}");
            return match self.host.run_command(line.trim_end()).await {
                Ok(reply) => Ok(GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::Assistant,
                    reply.unwrap_or_else(|| format!("(/{command} gave no reply)")),
                )])
                .with_description(format!("The reply of /{command}"))),
                Err(CommandError::Unknown(n)) => Err(ErrorData::invalid_params(
                    format!("no slash command /{n}; prompts/list names the commands"),
                    None,
                )),
                Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
            };
        }
        let text = self.host.skill(name).map_err(|e| match e {
            crate::host::SkillError::Unknown(_) => ErrorData::invalid_params(
                format!("no prompt named '{name}': skills are named plugin:name and commands /name; prompts/list names them"),
                None,
            ),
            other => ErrorData::internal_error(other.to_string(), None),
        })?;
        let description = self
            .host
            .registry()
            .skill(name)
            .map(|s| s.description.clone())
            .unwrap_or_default();
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(description),
        )
    }
}

impl ServerHandler for PluginServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("plughost", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools of the plugins loaded by plughost. Skills are prompts named plugin:name; slash commands are prompts named /name.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp moves the request's `_meta` into the context.
        let key = context
            .meta
            .get(idempotent::META_KEY)
            .or_else(|| {
                request
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(idempotent::META_KEY))
            })
            .and_then(Value::as_str)
            .map(str::to_string);
        match (&self.cluster, key) {
            (Some(cluster), Some(key)) => {
                let cluster = cluster.clone();
                let hash = idempotent::request_key(&request);
                let (name, arguments) = (request.name, request.arguments);
                idempotent::call(&cluster, &key, hash, || self.call(&name, arguments))
                    .await
                    .map(Into::into)
            }
            _ => Ok(self.call(&request.name, request.arguments).await.into()),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(self.prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(self
            .prompt(&request.name, request.arguments.as_ref())
            .await?
            .into())
    }
}

pub mod idempotent;
mod stdio_limit;

/// The largest MCP message read from stdio (rmcp's own default); a longer
/// one is answered with a JSON-RPC error instead of being dropped unseen.
pub const MAX_STDIO_MESSAGE: usize = 16 * 1024 * 1024;

/// Serve `server` on this process's stdin/stdout until the client closes
/// them. Whatever else writes to standard output (a plugin's `print`) must
/// already be pointed elsewhere (see `plughost mcp`).
pub async fn serve_stdio<R, W>(server: PluginServer, input: R, output: W) -> Result<(), String>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use rmcp::ServiceExt;
    let (input, output, writer) = stdio_limit::bounded(input, output, MAX_STDIO_MESSAGE);
    let running = server
        .serve((input, output))
        .await
        .map_err(|e| format!("the MCP client did not complete the handshake: {e}"))?;
    let ended = running
        .waiting()
        .await
        .map_err(|e| format!("the MCP server stopped: {e}"));
    // rmcp has dropped its end: the writer copies what is left, then ends
    // (bounded, should a plugin's child hold something open).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    ended?;
    Ok(())
}
