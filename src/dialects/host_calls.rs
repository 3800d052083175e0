//! What a plugin running in a worker process asks of the host that loaded
//! it, so its context members keep their in-process meaning (issue 47):
//! `inject_message` joins the host's conversation, `emit` reaches the
//! host's subscribers (other plugins, other workers), `has_plugin` sees
//! the host's plugins, `dispatch_tool` and `llm` reach the host's agent.
//!
//! Both sides run the same dialect code. In a worker, the dialect's
//! context finds the worker's bridge ([`bridge`]) and forwards the
//! member as a [`HostCall`] (the isolation layer carries it on the
//! worker's socket and blocks the caller until the answer); in plughost,
//! [`serve`] runs the call with the very functions the in-process member
//! calls, on the host that loaded the plugin. Why here and not in
//! `isolation`: the dialects decide what a member means; `isolation` only
//! carries values (and must not be named by the dialects' code).

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::extensions::Extensions;

/// One call of a worker's plugin into its host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum HostCall {
    /// Hermes `ctx.inject_message` from a tool call of `session` (empty:
    /// outside a tool call), into the chat `session_key` names if any.
    Inject {
        session: String,
        content: String,
        role: String,
        #[serde(default)]
        session_key: Option<String>,
    },
    /// Hermes `ctx.dispatch_tool`: the host's whole tool pipeline.
    DispatchTool {
        tool: String,
        args: Value,
        task_id: String,
    },
    /// Hermes `ctx.llm.complete`: the host agent's model.
    Complete {
        messages: Vec<Value>,
        params: Map<String, Value>,
    },
    /// Hermes `ctx.emit`: the namespaced event on the host's bus; answers
    /// how many subscribers it was queued for.
    Emit { event: String, payload: Value },
    /// Hermes `ctx.subscribe`: the worker's plugin's subscriber number
    /// `index` (of its subscriptions, in order) hears `event`; the host's
    /// bus calls it through the worker.
    Subscribe { event: String, index: usize },
    /// Hermes `ctx.call_mcp`: the host's MCP clients, its allowlist.
    /// Answers `{"ok": envelope}` or `{"raised": {"type", "message"}}` (the
    /// builtin exception the worker raises).
    CallMcp {
        server: String,
        tool: String,
        arguments: Value,
        timeout: Value,
    },
    /// Hermes `ctx.has_plugin`.
    HasPlugin { id: String },
    /// An execution middleware running in the worker calls its `next`:
    /// the rest of the chain, in plughost, of the middleware call `frame`
    /// (any dialect's; the isolation layer routes it to the waiting
    /// chain, never to [`serve`]). Answers `{"ok": value}` or
    /// `{"err": ExecError}`.
    ChainNext { frame: u64, payload: Value },
    /// Hermes `tools.mcp_tool`'s status functions: the host's MCP servers
    /// (a list of `{name, transport, state, tools, last_error}`).
    McpServers,
    /// The plugin finished loading under manifest name `name` (what
    /// `has_plugin` of other plugins matches).
    Loaded { name: String },
    /// What the adapter of the plugin's platform `platform` tells the
    /// gateway (a message, a platform event, a fatal error): any dialect's.
    PlatformSignal {
        platform: String,
        signal: super::platforms::PortSignal,
    },
    /// Hermes `ctx.platform_actions`: `verb` on the host gateway's
    /// `platform`; answers Hermes's result object.
    PlatformAction {
        verb: String,
        platform: String,
        args: Value,
    },
}

/// The worker's way to the host (set only in a worker process).
pub trait HostCalls: Send + Sync + 'static {
    /// Send `call` and wait for the host's answer (an error when the host
    /// refused it or went away).
    fn call(&self, call: HostCall) -> Result<Value, String>;
}

/// The bridge of a worker process (one plugin per worker, so one per
/// process; never set in plughost itself).
static BRIDGE: OnceLock<Arc<dyn HostCalls>> = OnceLock::new();

/// In a worker, before its plugin loads: its calls go over `calls`.
pub fn set_for_process(calls: Arc<dyn HostCalls>) {
    let _ = BRIDGE.set(calls);
}

/// The bridge when this process is a worker; `None` in plughost. (`host`:
/// the plugin's host state, kept for a per-host bridge to come.)
pub fn bridge(host: &Extensions) -> Option<Arc<dyn HostCalls>> {
    let _ = host;
    BRIDGE.get().cloned()
}

/// How the host side hands an event back to the plugin's worker (its
/// subscribers run there); implemented by the isolation layer.
pub trait Deliver: Send + Sync + 'static {
    /// Run the worker's subscriber number `index` with `payload` for
    /// `event`, returning when it has run (the in-process bus delivers in
    /// order).
    fn deliver(&self, event: &str, index: usize, payload: &Value);
}

/// In plughost: run `call` from plugin `plugin` (dialect `dialect`), loaded
/// in a worker of `host`, as the in-process member would have run.
pub fn serve(
    host: &Arc<Extensions>,
    dialect: &str,
    plugin: &str,
    call: HostCall,
    deliver: Arc<dyn Deliver>,
) -> Result<Value, String> {
    if let HostCall::PlatformSignal { platform, signal } = call {
        let table = host.peek::<super::platforms::PlatformTable>();
        let heard = table.is_some_and(|t| t.signal(plugin, &platform, signal));
        return Ok(Value::Bool(heard));
    }
    if let HostCall::ChainNext { .. } = call {
        return Err("a middleware's next_call is answered by the chain that called it".into());
    }
    match dialect {
        "hermes" => super::hermes::remote::serve(host, plugin, call, deliver),
        other => Err(format!(
            "plugin '{plugin}' ({other}) asked its host for something its dialect does not offer"
        )),
    }
}

/// In plughost: plugin `plugin` of `host` is gone (its supervisor dropped):
/// forget what its worker registered on the host (subscriptions, its
/// place in `has_plugin`).
pub fn forget(host: &Arc<Extensions>, dialect: &str, plugin: &str) {
    if dialect == "hermes" {
        super::hermes::remote::forget(host, plugin);
    }
}

/// In plughost, as isolated plugin `plugin` is about to be unloaded: let
/// what was emitted to it so far reach it first (bounded), as an
/// in-process plugin's teardown drains the bus.
pub fn drain(host: &Arc<Extensions>, dialect: &str) {
    if dialect == "hermes" {
        super::hermes::remote::drain(host);
    }
}

/// In a worker: run the plugin's own subscriber number `index` of `event`
/// (delivered by the host's bus).
pub fn deliver_here(dialect: &str, event: &str, index: usize, payload: Value) {
    if dialect == "hermes" {
        super::hermes::remote::deliver_here(event, index, payload);
    }
}
