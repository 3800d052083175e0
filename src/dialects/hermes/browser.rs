//! Hermes browser providers (`agent/browser_provider.py`,
//! `register_browser_provider`): cloud browser backends whose
//! `create_session(task_id)` hands Hermes's `browser_*` tools a CDP
//! websocket to drive (through the `agent-browser` CLI in Hermes).
//!
//! What plughost does with one: the provider is checked (a
//! `BrowserProvider` with a name), selected as Hermes selects it
//! (`browser.cloud_provider` in plughost's `config.json`, else Hermes's
//! `config.yaml`; unset, the first available one registered), and its
//! state recorded for `plugins doctor`. The `browser_*` tools themselves
//! need a CDP client driving a real browser, which plughost does not have
//! yet: an otherwise active provider is reported as "not active: the
//! browser_* tools are not hosted by plughost yet", and the registration
//! stays "registered, not used".

use std::path::Path;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::core::extensions::Extensions;
use crate::core::registry::Registration;
use crate::runtime::plugin_error;

/// The doctor's word for the kind.
const KIND: &str = "browser";

/// Which browser provider a host would use (`(plugin, name)`).
#[derive(Default)]
struct BrowserSlot(Mutex<Option<(String, String)>>);

/// `ctx.register_browser_provider(provider)`: always `None` (registered,
/// not used) for now, with the provider's state recorded.
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
        "selected, but not active: the browser_* tools are not hosted by plughost yet".into(),
    );
    Ok(None)
}
