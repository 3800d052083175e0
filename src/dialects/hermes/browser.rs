//! Hermes browser providers (`agent/browser_provider.py`,
//! `register_browser_provider`): cloud browser backends whose
//! `create_session(task_id)` hands Hermes's `browser_*` tools a CDP
//! websocket to drive (through the `agent-browser` CLI in Hermes; here
//! through [`super::browser_cdp`]).
//!
//! The provider is checked (a `BrowserProvider` with a name, whose
//! `is_available()` is true), selected as Hermes selects it
//! (`browser.cloud_provider` in plughost's `config.json`, else Hermes's
//! `config.yaml`; unset, the first available one registered), and then
//! backs the `browser_*` tools ([`super::browser_tools`]); its state is
//! recorded for `plugins doctor`. A session's browser is released when the
//! session ends (`on_session_finalize`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::core::extensions::Extensions;
use crate::core::hooks::{
    HookAction, HookCallback, HookEntry, HookEvent, HookPayload, HookReturn, HookStats,
};
use crate::core::registry::Registration;
use crate::runtime::plugin_error;

use super::browser_tools::{tools, Browsers};

/// The doctor's word for the kind.
const KIND: &str = "browser";

/// Which browser provider a host would use (`(plugin, name)`).
#[derive(Default)]
struct BrowserSlot(Mutex<Option<(String, String)>>);

/// `ctx.register_browser_provider(provider)`: the `browser_*` tools and
/// the session-end lane when it is the selected provider; `None`
/// (registered, not used, its state recorded) otherwise.
pub fn register(
    py: Python<'_>,
    plugin: &str,
    host: &Arc<Extensions>,
    home: &Path,
    provider: &Bound<'_, PyAny>,
) -> PyResult<Option<Vec<Registration>>> {
    let base = py
        .import("agent.browser_provider")?
        .getattr("BrowserProvider")?;
    let name = provider
        .getattr("name")
        .ok()
        .and_then(|n| n.extract::<String>().ok())
        .filter(|n| !n.trim().is_empty());
    let Some(name) = name.filter(|_| provider.is_instance(&base).unwrap_or(false)) else {
        tracing::warn!("Plugin '{plugin}' tried to register a browser provider that is not a BrowserProvider with a name. Ignoring.");
        return Ok(None);
    };
    let states = host.get::<super::providers::ProviderStates>();
    let available = provider
        .call_method0("is_available")
        .and_then(|a| a.is_truthy())
        .unwrap_or_else(|e| {
            let error = plugin_error(py, &e);
            tracing::warn!(
                "browser provider '{name}': is_available() raised {}",
                error.described()
            );
            false
        });
    if !available {
        states.record(
            plugin,
            KIND,
            &name,
            "not active: is_available() is false".into(),
        );
        return Ok(None);
    }
    let wanted = super::providers::configured_key(home, KIND, "cloud_provider");
    if let Some(w) = wanted.as_ref().filter(|w| **w != name) {
        let why = format!("not active: browser.cloud_provider is '{w}'");
        states.record(plugin, KIND, &name, why);
        return Ok(None);
    }
    let slot = host.get::<BrowserSlot>();
    let mut chosen = slot.0.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, other)) = chosen.as_ref() {
        let why = format!(
            "not active: '{other}' was registered first (set browser.cloud_provider to choose)"
        );
        states.record(plugin, KIND, &name, why);
        return Ok(None);
    }
    *chosen = Some((plugin.to_string(), name.clone()));
    states.record(
        plugin,
        KIND,
        &name,
        "active (backs the browser_* tools)".into(),
    );
    let browsers = Arc::new(Browsers::new(plugin, &name, provider.clone().unbind()));
    let mut out: Vec<Registration> = tools(&browsers)
        .into_iter()
        .map(Registration::Tool)
        .collect();
    out.push(Registration::Hook {
        event: Some(HookEvent::SessionClosing),
        name: HookEvent::SessionClosing.name().to_string(),
        entry: HookEntry {
            owner: plugin.to_string(),
            label: format!("{name}.close_session"),
            priority: 0,
            callback: Arc::new(SessionEnd(browsers)),
            stats: Arc::new(HookStats::default()),
        },
    });
    Ok(Some(out))
}

/// The session's browser released when the session ends.
struct SessionEnd(Arc<Browsers>);

impl HookCallback for SessionEnd {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        if let HookPayload::Session(c) = payload {
            self.0.close_now(&c.session_id);
        }
        HookReturn::Ready(Ok(HookAction::Continue))
    }
}
