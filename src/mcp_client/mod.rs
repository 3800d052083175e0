//! plughost as an MCP client: the servers of `mcp_servers` in
//! `config.json` and those bundles declare (their `mcp.json`), connected
//! through the official Rust SDK (rmcp) when the host is built, their
//! tools in the host's registry beside plugin tools (see [`tools`] for
//! their names), a dead server restarted by the next call to it, and each
//! server's state in `plugins doctor`.
//!
//! Plugins reach the servers through the host's
//! [`crate::core::mcp::McpSlot`] (Hermes's `ctx.call_mcp`).
//!
//! Layer: after `isolation`, before `host` (the host builds it; it knows
//! no dialect).

// --- issue 50: an isolated bundle's servers, confined as its worker ---
mod confined;
mod runtime;
mod server;
pub mod tools;
mod transport;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::core::extensions::Extensions;
use crate::core::hooks::BoxFuture;
use crate::core::mcp::{McpAnswer, McpCallError, McpCalls, McpSlot};
use crate::core::registry::Tool;
use crate::plugins::config::{self, ConfigError, DeclaredMcpServers, McpServerSpec};

pub use server::ServerStatus;

/// One host's MCP servers and the runtime their connections live on.
pub struct McpClient {
    servers: BTreeMap<String, Arc<server::Server>>,
    runtime: runtime::ClientRuntime,
    /// Server → the registry names of the tools it offered at connect.
    tool_names: BTreeMap<String, Vec<String>>,
}

/// Where the host keeps its client (in its extension map, dropped with it).
struct Held(Arc<McpClient>);

impl McpClient {
    /// Each server's state, in name order.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers.values().map(|s| s.status()).collect()
    }
}

impl McpCalls for McpClient {
    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> BoxFuture<Result<McpAnswer, McpCallError>> {
        let Some(found) = self.servers.get(server).cloned() else {
            let unknown = McpCallError::UnknownServer(server.to_string());
            return Box::pin(async move { Err(unknown) });
        };
        let tool = tool.to_string();
        let call = self
            .runtime
            .handle()
            .spawn(async move { found.call(&tool, arguments, timeout).await });
        let name = server.to_string();
        Box::pin(async move {
            call.await.unwrap_or_else(|e| {
                Err(McpCallError::NotConnected {
                    server: name,
                    problem: format!("the host's MCP client stopped ({e})"),
                })
            })
        })
    }
    fn servers(&self) -> Vec<crate::core::mcp::McpServerInfo> {
        self.statuses()
            .into_iter()
            .map(|s| crate::core::mcp::McpServerInfo {
                tools: self.tool_names.get(&s.name).cloned().unwrap_or_default(),
                transport: s.transport.to_string(),
                state: s.state.to_string(),
                last_error: s.last_error,
                name: s.name,
            })
            .collect()
    }
}

/// Connect the host's MCP servers (`config.json`'s, then those its plugins
/// declared while loading) and return their tools for the registry. The
/// client stays in `extensions` (with the host) and answers plugins'
/// calls through [`McpSlot`]. A server that cannot be reached leaves its
/// error for `plugins doctor` and offers no tools; a malformed
/// `mcp_servers` fails the build, as other config errors do.
pub fn attach(home: &Path, extensions: &Arc<Extensions>) -> Result<Vec<Tool>, ConfigError> {
    extensions.get::<McpSlot>().set_home(home);
    let mut specs = config::read_mcp_servers(home)?;
    if let Some(declared) = extensions.peek::<DeclaredMcpServers>() {
        specs.extend(declared.take());
    }
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = match runtime::ClientRuntime::new() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(
                "cannot start the MCP client's runtime ({e}); no MCP server is connected"
            );
            return Ok(Vec::new());
        }
    };
    let servers = unique(specs, home);
    let started = {
        let servers: Vec<Arc<server::Server>> = servers.values().cloned().collect();
        runtime.wait(async move {
            let tasks: Vec<_> = servers
                .into_iter()
                .map(|s| tokio::spawn(async move { (s.start().await, s) }))
                .collect();
            let mut out = Vec::new();
            for task in tasks {
                if let Ok(done) = task.await {
                    out.push(done);
                }
            }
            out
        })
    }
    .unwrap_or_default();
    let mut registry_tools = Vec::new();
    let mut tool_names = BTreeMap::new(); // h7
    for (listed, server) in started {
        if let Ok(listed) = &listed {
            tool_names.insert(
                server.spec.name.clone(),
                listed
                    .iter()
                    .map(|t| tools::tool_name(&server.spec.name, &t.name))
                    .collect::<Vec<_>>(),
            );
        }
        match listed {
            Ok(listed) => registry_tools.extend(
                listed
                    .iter()
                    .map(|t| tools::registry_tool(&server, t, runtime.handle())),
            ),
            Err(problem) => tracing::warn!(
                "MCP server '{}' is not connected: {problem}; its tools are not offered",
                server.spec.name
            ),
        }
    }
    let client = Arc::new(McpClient {
        servers,
        runtime,
        tool_names,
    });
    extensions.get_or_init(|| Held(Arc::clone(&client)));
    extensions.get::<McpSlot>().set(client);
    Ok(registry_tools)
}

/// The servers by name; a later declaration of a name already taken is
/// ignored with a warning (`config.json` comes first, so it wins).
fn unique(specs: Vec<McpServerSpec>, home: &Path) -> BTreeMap<String, Arc<server::Server>> {
    let mut servers = BTreeMap::new();
    for spec in specs {
        if let Some(first) = servers
            .get(&spec.name)
            .map(|s: &Arc<server::Server>| &s.spec)
        {
            tracing::warn!(
                "MCP server '{}' of '{}' is ignored: '{}' declared a server of that name first",
                spec.name,
                spec.owner,
                first.owner
            );
            continue;
        }
        servers.insert(spec.name.clone(), Arc::new(server::Server::new(spec, home)));
    }
    servers
}

/// The host's client, if it has MCP servers.
pub fn client(extensions: &Extensions) -> Option<Arc<McpClient>> {
    extensions.peek::<Held>().map(|h| Arc::clone(&h.0))
}

/// The `mcp_servers` section of `plugins doctor`: each server's state as
/// JSON, and its text lines; `None` when the host has no MCP servers.
pub fn doctor_section(extensions: &Extensions) -> Option<(Value, Vec<String>)> {
    let statuses = client(extensions)?.statuses();
    let mut lines = vec!["MCP servers:".to_string()];
    for s in &statuses {
        let mut line = format!(
            "    {} ({}, from {}): {}",
            s.name, s.transport, s.owner, s.state
        );
        if s.state != "failed" {
            line.push_str(&format!(", {} tools", s.tools));
        }
        if s.connects > 1 {
            line.push_str(&format!(", restarted {} times", s.connects - 1));
        }
        if let Some(e) = &s.last_error {
            line.push_str(&format!("; last error: {e}"));
        }
        lines.push(line);
    }
    let json = serde_json::to_value(&statuses).unwrap_or(Value::Null);
    Some((json, lines))
}
