//! `ctx.call_mcp(server, tool, arguments=None, timeout=30)`: a Hermes
//! plugin calls a tool of one of the host's MCP servers directly (no
//! hooks, as Hermes calls its MCP handler directly), with Hermes's rules
//! (`hermes_cli/plugins.py`):
//!
//! - Default deny: a server not in `plugins.entries.<plugin>.mcp_allowlist`
//!   of `config.json` (read at each call) raises `PermissionError` with
//!   Hermes's message.
//! - `timeout` is a number of seconds (anything else is 30), clamped to
//!   1–600.
//! - The answer is Hermes's envelope: `{"ok": True, "result": …}` (with
//!   `"structuredContent"` when the server sent one beside its text, or the
//!   structured content as `result` when it sent no text), or `{"ok":
//!   False, "error": …}` for a tool's `isError`, a server that is not
//!   connected, a failed or timed-out call; a result over 65536 characters
//!   is cut, with `… [truncated]` and `"truncated": True`.
//!
//! The call goes through the host's MCP client (`crate::core::mcp`), the
//! same connections its `mcp_*` tools use, restarted the same way.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyPermissionError, PyValueError};
use pyo3::prelude::*;
use serde_json::{json, Map, Value};

use crate::core::extensions::Extensions;
use crate::core::mcp::{McpAnswer, McpCallError, McpSlot};

/// Hermes's cap on a result's characters.
const RESULT_CHAR_CAP: usize = 65536;

/// `timeout` as Hermes reads it: a number, else 30; then 1–600 s.
fn clamp_timeout(timeout: Option<&Bound<'_, PyAny>>) -> Duration {
    let seconds = timeout
        .filter(|t| !t.is_none())
        .map(|t| t.extract::<f64>().ok())
        .unwrap_or(Some(30.0))
        .filter(|s| s.is_finite())
        .unwrap_or(30.0);
    Duration::from_secs_f64(seconds.clamp(1.0, 600.0))
}

/// `ctx.call_mcp` of plugin `plugin` on the host whose state is `host`.
pub fn call_mcp(
    py: Python<'_>,
    host: &Arc<Extensions>,
    plugin: &str,
    server: &str,
    tool: &str,
    arguments: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    // In a worker (issue 47): the host's servers, allowlist and envelope.
    if let Some(bridge) = crate::dialects::host_calls::bridge(host) {
        return super::remote::call_mcp_from_worker(py, bridge, server, tool, arguments, timeout);
    }
    let slot = host.get::<McpSlot>();
    let allowed = slot
        .home()
        .map(|home| crate::plugins::config::read_mcp_allowlist(&home, plugin))
        .unwrap_or_default();
    if !allowed.iter().any(|s| s == server) {
        return Err(PyPermissionError::new_err(format!(
            "Plugin '{plugin}' is not allowed to call MCP server '{server}'. Add it to plugins.entries.{plugin}.mcp_allowlist in config.json to grant access (default is no MCP access)."
        )));
    }
    let arguments: Map<String, Value> = match arguments.filter(|a| !a.is_none()) {
        None => Map::new(),
        Some(a) => match crate::runtime::value::to_json(a) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                return Err(PyValueError::new_err(format!(
                    "call_mcp('{server}', '{tool}'): arguments must be a dict"
                )))
            }
            Err(e) => {
                return Err(PyValueError::new_err(format!(
                    "call_mcp('{server}', '{tool}'): arguments are not JSON-like: {e}"
                )))
            }
        },
    };
    let timeout = clamp_timeout(timeout);
    let envelope = match slot.get() {
        None => envelope(Err(McpCallError::UnknownServer(server.to_string()))),
        Some(calls) => {
            let pending = calls.call(server, tool, arguments, timeout);
            let done = py.detach(|| super::link::wait(host, pending));
            envelope(done.unwrap_or_else(|problem| {
                Err(McpCallError::NotConnected {
                    server: server.to_string(),
                    problem,
                })
            }))
        }
    };
    tracing::debug!("Plugin {plugin} called MCP {server}/{tool} (timeout={timeout:?})");
    let text = envelope.to_string();
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// Hermes's envelope of a call's outcome.
fn envelope(done: Result<McpAnswer, McpCallError>) -> Value {
    let answer = match done {
        Ok(a) => a,
        // Hermes says "not connected" for a server it does not have too.
        Err(McpCallError::UnknownServer(s)) => {
            return json!({"ok": false, "error": format!("MCP server '{s}' is not connected")})
        }
        Err(e) => return json!({"ok": false, "error": e.to_string()}),
    };
    if answer.is_error {
        let text = if answer.text.trim().is_empty() {
            "MCP tool returned an error".to_string()
        } else {
            answer.text
        };
        return capped(json!({"ok": false, "error": text}), "error");
    }
    let has_text = !answer.text.trim().is_empty();
    let mut out = json!({"ok": true, "result": answer.text});
    match answer.structured {
        Some(s) if !has_text => out["result"] = s,
        // Dropped when a text block is the same JSON (the spec's dual emit).
        Some(s) if serde_json::from_str::<Value>(&answer.text).ok().as_ref() != Some(&s) => {
            out["structuredContent"] = s
        }
        _ => {}
    }
    capped(out, "result")
}

/// `envelope` with its `field` text cut at Hermes's cap.
fn capped(mut envelope: Value, field: &str) -> Value {
    if let Some(text) = envelope[field].as_str() {
        if text.chars().count() > RESULT_CHAR_CAP {
            let cut: String = text.chars().take(RESULT_CHAR_CAP).collect();
            envelope[field] = Value::from(format!("{cut}… [truncated]"));
            envelope["truncated"] = Value::Bool(true);
        }
    }
    envelope
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_hermes_envelopes() {
        let ok = |text: &str, structured: Option<Value>| {
            envelope(Ok(McpAnswer {
                text: text.into(),
                structured,
                is_error: false,
            }))
        };
        assert_eq!(ok("42", None), json!({"ok": true, "result": "42"}));
        assert_eq!(
            ok("", Some(json!({"n": 1}))),
            json!({"ok": true, "result": {"n": 1}})
        );
        assert_eq!(
            ok("{\"n\": 1}", Some(json!({"n": 1}))),
            json!({"ok": true, "result": "{\"n\": 1}"})
        );
        assert_eq!(
            ok("one", Some(json!({"n": 1}))),
            json!({"ok": true, "result": "one", "structuredContent": {"n": 1}})
        );
        let failed = envelope(Ok(McpAnswer {
            text: "bad".into(),
            structured: None,
            is_error: true,
        }));
        assert_eq!(failed, json!({"ok": false, "error": "bad"}));
        let long = ok(&"x".repeat(RESULT_CHAR_CAP + 5), None);
        assert_eq!(long["truncated"], true);
        assert!(long["result"].as_str().unwrap().ends_with("… [truncated]"));
        let missing = envelope(Err(McpCallError::UnknownServer("s".into())));
        assert_eq!(missing["error"], "MCP server 's' is not connected");
    }
}
