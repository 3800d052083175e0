//! Hermes's `ctx.platform_actions` on plughost's gateway: the verb goes to
//! the connected adapter of the platform it names, with Hermes's error
//! codes for every way there is none (`hermes_cli/platform_actions.py`:
//! `gateway_unavailable`, `unknown_platform`, `adapter_not_registered`,
//! `adapter_disconnected`). The capability gate and the arguments are
//! checked in Python before this runs (the compat facade); the verb itself
//! runs on the adapter, in whichever process it lives
//! ([`crate::dialects::platforms::PlatformPort::act`]).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::dialects::platforms::PlatformTable;

/// Hermes's own platforms (`gateway.config.Platform`): a name no plugin
/// registered is still known when it is one of these.
const HERMES_PLATFORMS: &[&str] = &[
    "telegram",
    "discord",
    "slack",
    "whatsapp",
    "signal",
    "matrix",
    "mattermost",
    "email",
    "sms",
    "homeassistant",
    "dingtalk",
    "feishu",
    "wecom",
    "weixin",
    "qqbot",
    "bluebubbles",
    "api_server",
    "webhook",
];

fn failed(code: &str, detail: String) -> Value {
    json!({"ok": false, "error": code, "detail": detail})
}

/// Run `verb` with `args` on `platform` of the gateway `table` holds
/// (`None`: no gateway in this host).
pub async fn act(
    table: Option<Arc<PlatformTable>>,
    verb: String,
    platform: String,
    args: Value,
) -> Value {
    let Some(table) = table.filter(|t| t.injector().is_some()) else {
        return failed(
            "gateway_unavailable",
            "no gateway runner is active in this process".into(),
        );
    };
    let name = platform.trim().to_lowercase();
    let registered = table.is_registered(&name);
    if !registered && !HERMES_PLATFORMS.contains(&name.as_str()) {
        return failed("unknown_platform", format!("unknown platform '{platform}'"));
    }
    if !registered {
        return failed(
            "adapter_not_registered",
            format!("no {name} adapter is registered"),
        );
    }
    let Some(port) = table.port(&name) else {
        return failed(
            "adapter_disconnected",
            format!("the {name} adapter is not connected"),
        );
    };
    port.act(name, verb, args).await
}

/// [`act`] from a thread that may block (the facade runs it in
/// `asyncio.to_thread`; a worker's host call has a thread of its own).
pub fn act_blocking(
    table: Option<Arc<PlatformTable>>,
    verb: String,
    platform: String,
    args: Value,
) -> Value {
    let Some(rt) = crate::runtime::Runtime::get() else {
        return failed(
            "gateway_unavailable",
            "plughost's runtime is not running".into(),
        );
    };
    let (tx, rx) = std::sync::mpsc::channel();
    rt.tokio().spawn(async move {
        let _ = tx.send(act(table, verb, platform, args).await);
    });
    rx.recv().unwrap_or_else(|_| {
        failed(
            "action_failed",
            "the action was dropped before it finished".into(),
        )
    })
}
