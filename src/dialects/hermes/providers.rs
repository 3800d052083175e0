//! Hermes providers that back a tool: a registered provider gives the
//! agent the tool Hermes offers for it, its output the tool's result.
//!
//! Done: image generation (`register_image_gen_provider` → `image_generate`,
//! the provider's response dict as JSON) and text to speech
//! (`register_tts_provider` → `text_to_speech`), speech to text
//! (`register_transcription_provider` → `transcribe_audio`, section `stt`). Selection as in Hermes:
//! `<kind>.provider` (plughost's `config.json` or Hermes's `config.yaml`)
//! names the active one; unset, the first registered in the host is active. Each provider plugin's state is recorded for
//! `plugins doctor` ([`ProviderStates`]): active, or why not.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use serde_json::Value;

use crate::core::extensions::Extensions;
use crate::core::registry::{Registration, Tool, ToolSpec};
use crate::runtime::plugin_error;

use super::handlers::HermesTool;
use super::render::HermesRenderer;

/// One registered provider: `(kind, name, state)`.
type ProviderState = (String, String, String);

/// Per plugin key: the providers it registered, with their states.
#[derive(Default)]
pub struct ProviderStates(Mutex<BTreeMap<String, Vec<ProviderState>>>);

impl ProviderStates {
    /// Record `plugin`'s provider `name` of `kind` and its state.
    pub fn record(&self, plugin: &str, kind: &str, name: &str, state: String) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(plugin.to_string()).or_default();
        list.retain(|(k, n, _)| !(k == kind && n == name));
        list.push((kind.to_string(), name.to_string(), state));
    }

    /// What `plugin` registered, as doctor lines.
    pub fn lines(&self, plugin: &str) -> Vec<String> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(plugin)
            .into_iter()
            .flatten()
            .map(|(kind, name, state)| format!("{kind} provider '{name}': {state}"))
            .collect()
    }
}

/// A provider kind that backs one tool: where its base class and the
/// compat tool helper live (`TOOL_SCHEMA`, `_plughost_tool(provider)`).
pub struct ToolProvider {
    /// The config section (`image_gen`, `tts`) and the doctor's word.
    pub kind: &'static str,
    pub module: &'static str,
    pub base: &'static str,
    pub tool: &'static str,
}

/// `register_image_gen_provider` → `image_generate`.
pub const IMAGE_GEN: ToolProvider = ToolProvider {
    kind: "image_gen",
    module: "agent.image_gen_provider",
    base: "ImageGenProvider",
    tool: "image_generate",
};

/// `register_tts_provider` → `text_to_speech`.
pub const TTS: ToolProvider = ToolProvider {
    kind: "tts",
    module: "agent.tts_provider",
    base: "TTSProvider",
    tool: "text_to_speech",
};

/// `register_transcription_provider` → `transcribe_audio` (section `stt`).
pub const STT: ToolProvider = ToolProvider {
    kind: "stt",
    module: "agent.transcription_provider",
    base: "TranscriptionProvider",
    tool: "transcribe_audio",
};

/// Which provider of each kind is active in a host (one per kind, as
/// Hermes's registries), by kind.
#[derive(Default)]
struct ActiveSlots(Mutex<BTreeMap<&'static str, String>>);

/// `<section>.provider` of plughost's `config.json`, else Hermes's `config.yaml`.
pub fn configured(home: &Path, section: &str) -> Option<String> {
    configured_key(home, section, "provider")
}

/// `<section>.<key>` of plughost's `config.json`, else Hermes's `config.yaml`.
pub fn configured_key(home: &Path, section: &str, key: &str) -> Option<String> {
    let plughost = std::fs::read_to_string(crate::plugins::config::config_path(home))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    let hermes = std::fs::read_to_string(super::discover::hermes_home().join("config.yaml"))
        .ok()
        .and_then(|t| serde_saphyr::from_str::<Value>(&t).ok());
    [plughost, hermes]
        .into_iter()
        .flatten()
        .find_map(|doc| Some(doc.get(section)?.get(key)?.as_str()?.trim().to_string()))
        .filter(|s| !s.is_empty())
}

fn name_of(provider: &Bound<'_, PyAny>) -> Option<String> {
    provider
        .getattr("name")
        .ok()
        .and_then(|n| n.extract::<String>().ok())
        .filter(|n| !n.trim().is_empty())
}

/// `ctx.register_<kind>_provider(provider)`: `spec`'s tool when it is the
/// active provider of its kind; nothing (its state recorded) otherwise;
/// `None` for what is not an instance of the kind's base class (ignored,
/// as Hermes does: registered, not used).
pub fn register(
    py: Python<'_>,
    spec: &ToolProvider,
    (plugin, host, home): (&str, &Arc<Extensions>, &Path),
    provider: &Bound<'_, PyAny>,
) -> PyResult<Option<Vec<Registration>>> {
    let module = py.import(spec.module)?;
    let base = module.getattr(spec.base)?;
    let states = host.get::<ProviderStates>();
    let Some(name) = name_of(provider).filter(|_| provider.is_instance(&base).unwrap_or(false))
    else {
        tracing::warn!(
            "Plugin '{plugin}' tried to register a {} provider that is not a {} with a name. Ignoring.",
            spec.kind,
            spec.base
        );
        return Ok(None);
    };
    let kind = spec.kind;
    let available = provider
        .call_method0("is_available")
        .and_then(|a| a.is_truthy())
        .unwrap_or_else(|e| {
            let error = plugin_error(py, &e);
            tracing::warn!(
                "{kind} provider '{name}': is_available() raised {}",
                error.described()
            );
            false
        });
    if !available {
        states.record(
            plugin,
            kind,
            &name,
            "not active: is_available() is false".into(),
        );
        return Ok(Some(Vec::new()));
    }
    let wanted = configured(home, kind);
    if let Some(w) = wanted.as_ref().filter(|w| **w != name) {
        states.record(
            plugin,
            kind,
            &name,
            format!("not active: {kind}.provider is '{w}'"),
        );
        return Ok(Some(Vec::new()));
    }
    let slots = host.get::<ActiveSlots>();
    {
        let mut active = slots.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(other) = active.get(kind) {
            let why = format!(
                "not active: '{other}' was registered first (set {kind}.provider to choose)"
            );
            states.record(plugin, kind, &name, why);
            return Ok(Some(Vec::new()));
        }
        active.insert(kind, name.clone());
    }
    let schema: Value =
        crate::runtime::value::to_json(&module.getattr("TOOL_SCHEMA")?).unwrap_or(Value::Null);
    let (parameters, description) = crate::dialects::flowly::normalize_schema(&schema);
    let handler = module.getattr("_plughost_tool")?.call1((provider,))?;
    let handler = HermesTool::new(py, handler.unbind(), None, Vec::new(), Arc::clone(host))?;
    let mut tool = Tool::new(
        ToolSpec {
            name: spec.tool.into(),
            description,
            parameters,
            plugin: plugin.to_string(),
            toolset: kind.into(),
            ..Default::default()
        },
        Arc::new(handler),
    );
    tool.renderer = Some(Arc::new(HermesRenderer));
    states.record(
        plugin,
        kind,
        &name,
        format!("active (backs the {} tool)", spec.tool),
    );
    Ok(Some(vec![Registration::Tool(tool)]))
}

/// What `plugin`'s providers are, as doctor lines (see [`ProviderStates`]).
pub fn doctor_lines(host: &Extensions, plugin: &str) -> Vec<String> {
    host.peek::<ProviderStates>()
        .map(|s| s.lines(plugin))
        .unwrap_or_default()
}
