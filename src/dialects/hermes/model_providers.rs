//! Hermes model-provider plugins (`kind: model-provider`): their
//! `__init__.py` calls `providers.register_provider(ProviderProfile(...))`
//! when imported, and has no `register(ctx)` (Hermes's `providers`
//! package imports them itself). plughost imports them as it imports any
//! Hermes plugin, then reads the profiles registered while the plugin
//! loaded into the host's [`ModelProfiles`]: `--model NAME:MODEL` calls
//! the profile's `base_url` with its `default_headers` and the key of its
//! first set `env_vars`, over the OpenAI-compatible transport
//! (`api_mode: chat_completions`); a profile of another `api_mode` or
//! `auth_type` is recorded and refused with the reason when picked.

use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule};

use crate::core::extensions::Extensions;
use crate::core::model_profiles::{ModelProfile, ModelProfiles, Transport};
use crate::core::outcome::PluginError;
use crate::core::registry::Registration;
use crate::dialects::shared::register_function;

/// The plugin's `register`, or, for a model-provider plugin (which
/// registers when imported, and whose `register(ctx)` Hermes's plugin
/// manager skips), one that does nothing.
pub fn register_of<'py>(
    py: Python<'py>,
    module: &Bound<'py, PyModule>,
    dir: &Path,
) -> Result<Bound<'py, PyAny>, PluginError> {
    let missing = "no register() function (a Hermes plugin's __init__.py defines register(ctx))";
    if !is_model_provider(dir) {
        return register_function(module, missing);
    }
    py.eval(c"lambda ctx: None", None, None)
        .map_err(|e| crate::runtime::plugin_error(py, &e))
}

/// Whether the plugin's manifest says `kind: model-provider`.
fn is_model_provider(dir: &Path) -> bool {
    super::manifest::find(dir)
        .and_then(|path| super::manifest::load(&path, dir).ok())
        .is_some_and(|m| m.kind == super::manifest::HermesKind::ModelProvider)
}

/// The profiles registered since the last plugin loaded, as `plugin`'s
/// registrations (the host keeps them in its [`ModelProfiles`], whether the
/// plugin runs in-process or in a worker). None when no plugin imported
/// `providers`.
pub fn collect(py: Python<'_>, state: &Extensions, plugin: &str) -> Vec<Registration> {
    let mut found = Vec::new();
    let Ok(modules) = py.import("sys").and_then(|s| s.getattr("modules")) else {
        return found;
    };
    let Ok(providers) = modules.get_item("providers") else {
        return found;
    };
    let Ok(registry) = providers.getattr("_REGISTRY") else {
        return found;
    };
    let Ok(registry) = registry.cast_into::<PyDict>() else {
        return found;
    };
    let claimed = state.get::<Claimed>();
    for (name, profile) in registry.iter() {
        let Ok(name) = name.extract::<String>() else {
            continue;
        };
        // An object already read (by this plugin or an earlier one) is not re-claimed.
        let id = profile.as_ptr() as usize;
        if !claimed.claim(id) {
            continue;
        }
        match read(&name, &profile, plugin) {
            Ok(p) => {
                tracing::info!("Hermes plugin '{plugin}' registers model provider '{name}'");
                found.push(Registration::ModelProvider(p));
            }
            Err(e) => tracing::warn!(
                "Hermes plugin '{plugin}': model provider '{name}' cannot be read: {e}"
            ),
        }
    }
    found
}

/// The profile objects already read, by identity.
#[derive(Default)]
struct Claimed(std::sync::Mutex<std::collections::HashSet<usize>>);

impl Claimed {
    fn claim(&self, id: usize) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id)
    }
}

/// A `ProviderProfile` (Hermes's or the compat one) read by its fields.
fn read(name: &str, p: &Bound<'_, PyAny>, plugin: &str) -> PyResult<ModelProfile> {
    let text = |attr: &str| -> String {
        p.getattr(attr)
            .ok()
            .filter(|v| !v.is_none())
            .and_then(|v| v.extract::<String>().ok())
            .unwrap_or_default()
    };
    let list = |attr: &str| -> Vec<String> {
        p.getattr(attr)
            .ok()
            .filter(|v| !v.is_none())
            .and_then(|v| v.extract::<Vec<String>>().ok())
            .unwrap_or_default()
    };
    let mut headers = Vec::new();
    if let Ok(h) = p.getattr("default_headers") {
        if let Ok(h) = h.cast::<PyDict>() {
            for (k, v) in h.iter() {
                headers.push((k.str()?.to_string(), v.str()?.to_string()));
            }
        }
    }
    let mode = text("api_mode");
    let transport = match mode.as_str() {
        "" | "chat_completions" => Transport::ChatCompletions,
        other => Transport::Other(other.to_string()),
    };
    let (key_vars, base_url_var) = split_env_vars(name, list("env_vars"));
    Ok(ModelProfile {
        name: name.to_string(),
        aliases: list("aliases"),
        plugin: plugin.to_string(),
        dialect: super::discover::DIALECT.to_string(),
        base_url: text("base_url"),
        base_url_var,
        headers,
        key_vars,
        models: list("fallback_models"),
        transport,
        auth: text("auth_type"),
        code: Default::default(),
    })
}

/// The base-URL variables of Hermes's built-in providers
/// (`hermes_cli/auth.py`, `PROVIDER_REGISTRY`'s `base_url_env_var`, and
/// `hermes_cli/providers.py`'s overlays), which
/// its bundled model-provider plugins of the same name keep.
const BUILT_IN_BASE_URL_VARS: &[(&str, &str)] = &[
    ("lmstudio", "LM_BASE_URL"),
    // hermes_cli/providers.py's overlays add the aggregator's.
    ("openrouter", "OPENROUTER_BASE_URL"),
    ("copilot", "COPILOT_API_BASE_URL"),
    ("gemini", "GEMINI_BASE_URL"),
    ("zai", "GLM_BASE_URL"),
    ("kimi-coding", "KIMI_BASE_URL"),
    ("stepfun", "STEPFUN_BASE_URL"),
    ("arcee", "ARCEE_BASE_URL"),
    ("gmi", "GMI_BASE_URL"),
    ("minimax", "MINIMAX_BASE_URL"),
    ("anthropic", "ANTHROPIC_BASE_URL"),
    ("alibaba", "DASHSCOPE_BASE_URL"),
    ("alibaba-coding-plan", "ALIBABA_CODING_PLAN_BASE_URL"),
    ("minimax-cn", "MINIMAX_CN_BASE_URL"),
    ("deepseek", "DEEPSEEK_BASE_URL"),
    ("xai", "XAI_BASE_URL"),
    ("nvidia", "NVIDIA_BASE_URL"),
    ("ai-gateway", "AI_GATEWAY_BASE_URL"),
    ("opencode-zen", "OPENCODE_ZEN_BASE_URL"),
    ("opencode-go", "OPENCODE_GO_BASE_URL"),
    ("kilocode", "KILOCODE_BASE_URL"),
    ("huggingface", "HF_BASE_URL"),
    ("xiaomi", "XIAOMI_BASE_URL"),
    ("tencent-tokenhub", "TOKENHUB_BASE_URL"),
    ("ollama-cloud", "OLLAMA_BASE_URL"),
    ("azure-foundry", "AZURE_FOUNDRY_BASE_URL"),
];

/// A profile's `env_vars` as Hermes reads them (`hermes_cli/auth.py`):
/// those ending in `_BASE_URL` or `_URL` name the base URL (the first
/// one), the others the key; with none, the base-URL variable of the
/// built-in provider of that name.
fn split_env_vars(name: &str, vars: Vec<String>) -> (Vec<String>, Option<String>) {
    let is_url = |v: &String| v.ends_with("_BASE_URL") || v.ends_with("_URL");
    let base_url_var = vars.iter().find(|v| is_url(v)).cloned().or_else(|| {
        BUILT_IN_BASE_URL_VARS
            .iter()
            .find(|(provider, _)| *provider == name)
            .map(|(_, var)| var.to_string())
    });
    // (Hermes keeps every variable as a key when all of them look like
    // URLs; plughost never sends a URL as a bearer token.)
    let keys = vars.into_iter().filter(|v| !is_url(v)).collect();
    (keys, base_url_var)
}

/// `plugins doctor`'s lines for `plugin`'s model providers.
pub fn doctor_lines(state: &Extensions, plugin: &str) -> Vec<String> {
    state
        .peek::<ModelProfiles>()
        .map(|p| p.of(plugin).iter().map(|m| m.doctor_line()).collect())
        .unwrap_or_default()
}
