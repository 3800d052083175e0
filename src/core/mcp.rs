//! What plugins reach of the host's MCP client without the plugin layers
//! depending on it (as [`super::agent_link`] does for the agent): the
//! client, built with the host, puts an [`McpCalls`] in the host's
//! [`Extensions`](super::extensions::Extensions) ([`McpSlot`]); a
//! dialect's context (Hermes's `ctx.call_mcp`) calls through it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};

use super::hooks::BoxFuture;

/// What an MCP server answered to `tools/call`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct McpAnswer {
    /// The text of its content blocks, one per line (non-text blocks as a
    /// short note naming them).
    pub text: String,
    /// Its `structuredContent`, when it sent one.
    pub structured: Option<Value>,
    /// The server's `isError`: the tool ran and failed.
    pub is_error: bool,
}

/// Why a call got no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpCallError {
    /// No server of that name is configured.
    #[error("MCP server '{0}' is not configured")]
    UnknownServer(String),
    /// The server could not be (re)started or reached; the text says why.
    #[error("MCP server '{server}' is not connected: {problem}")]
    NotConnected { server: String, problem: String },
    /// The request failed on its way or the server answered with a protocol
    /// error (an unknown tool, bad arguments); the text says which.
    #[error("MCP call to '{server}' failed: {problem}")]
    Failed { server: String, problem: String },
    /// No answer within the limit.
    #[error("MCP server '{server}' did not answer within {} s", .after.as_secs_f64())]
    TimedOut { server: String, after: Duration },
}

/// The host's MCP servers, as a plugin's context calls them.
pub trait McpCalls: Send + Sync + 'static {
    /// Call `tool` of `server` with `arguments`, waiting at most `timeout`
    /// (a stdio server that died is restarted first).
    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> BoxFuture<Result<McpAnswer, McpCallError>>;
    /// Each server's state and the registry names of its tools (Hermes's
    /// `tools.mcp_tool.get_mcp_status` / `discover_mcp_tools`).
    fn servers(&self) -> Vec<McpServerInfo> {
        Vec::new()
    }
}

/// One MCP server as a plugin's status query sees it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct McpServerInfo {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `connected`, `disconnected` or `failed`.
    pub state: String,
    /// The registry names of its tools (`mcp_<server>_<tool>`).
    pub tools: Vec<String>,
    pub last_error: Option<String>,
}

/// The MCP client of a host, once it has one, and the home whose
/// `config.json` says which plugin may call which server (set even for a
/// host without servers, so a refusal names the real reason).
#[derive(Default)]
pub struct McpSlot {
    calls: RwLock<Option<Arc<dyn McpCalls>>>,
    home: RwLock<Option<PathBuf>>,
}

impl McpSlot {
    pub fn set(&self, calls: Arc<dyn McpCalls>) {
        *self.calls.write().unwrap_or_else(|e| e.into_inner()) = Some(calls);
    }

    pub fn get(&self) -> Option<Arc<dyn McpCalls>> {
        self.calls.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_home(&self, home: &Path) {
        *self.home.write().unwrap_or_else(|e| e.into_inner()) = Some(home.to_path_buf());
    }

    pub fn home(&self) -> Option<PathBuf> {
        self.home.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
