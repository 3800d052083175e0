//! Serving the loaded plugins to other programs: MCP ([`mcp`], on stdio for
//! `plughost mcp` and over streamable HTTP at `/mcp`), and the agent loop
//! behind an OpenAI-compatible Chat Completions endpoint ([`openai_api`]),
//! all in one axum server ([`http`], `plughost serve`) with
//! Prometheus metrics ([`metrics`]); named sessions left idle are evicted
//! ([`idle`]); plugins' scheduled tasks run on their timers ([`cron`]) and
//! their HTTP routes answer beside plughost's own ([`plugin_routes`]).

mod coarse_timer;
pub mod cron;
pub mod http;
pub mod idle;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod openai_api;
pub mod plugin_routes;
pub mod replicas;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::core::dispatch::ToolResult;
use crate::core::outcome::ToolOutcome;
use crate::host::Host;

/// Write one line to standard error, for a person watching the server.
/// Unlike `eprintln!`, which panics when standard error is gone (a closed
/// pipe: the log collector died), a failed write is dropped: a server's
/// work, its shutdown above all, never depends on its log.
pub fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// One tool call through the pipeline `plughost tools call` uses
/// ([`Host::call_tool`]), on a blocking thread of its own so calls overlap
/// even when a handler is synchronous, and bounded by `limit`: an async
/// handler past it is cancelled, a synchronous one abandoned (an isolated
/// plugin's call is dropped, which stops its worker).
pub async fn call_tool(
    host: &Arc<Host>,
    name: &str,
    args: Value,
    session: &str,
    limit: Duration,
) -> ToolResult {
    let (calling, name_owned, session) = (host.clone(), name.to_string(), session.to_string());
    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Handle::current();
    let job = tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            tokio::select! {
                r = calling.call_tool(&name_owned, args, &session) => Some(r),
                _ = cancel_rx => None,
            }
        })
    });
    match tokio::time::timeout(limit, job).await {
        Ok(Ok(Some(result))) => result,
        Ok(_) => refused(host, name, ToolOutcome::Cancelled),
        Err(_) => {
            drop(cancel_tx);
            refused(host, name, ToolOutcome::TimedOut { after: limit })
        }
    }
}

/// A call that did not reach (or finish) the pipeline, rendered as the host
/// renders every outcome.
pub(crate) fn refused(host: &Host, tool: &str, outcome: ToolOutcome) -> ToolResult {
    ToolResult {
        text: host.registry().renderer().render(tool, &outcome),
        outcome,
    }
}
