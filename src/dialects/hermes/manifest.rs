//! Hermes's `plugin.yaml` (else `plugin.yml`), read with Hermes's rules:
//! `manifest_version` up to 2 (a newer one loads with a warning), kinds
//! `standalone | backend | exclusive | platform | model-provider` (an
//! unknown kind is standalone, with a warning), a user plugin without a
//! `kind` whose `__init__.py` mentions a memory provider is `exclusive`,
//! and unknown fields are ignored.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::plugins::manifest::{Manifest, PluginKind, RequiredEnv};

/// Manifest file names Hermes probes, in order.
pub const MANIFEST_FILES: [&str; 2] = ["plugin.yaml", "plugin.yml"];

/// The highest `manifest_version` Hermes documents.
const MAX_MANIFEST_VERSION: i64 = 2;

/// A Hermes plugin kind (Hermes has two that plughost's manifest lacks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HermesKind {
    Standalone,
    Backend,
    Exclusive,
    Platform,
    ModelProvider,
}

impl HermesKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HermesKind::Standalone => "standalone",
            HermesKind::Backend => "backend",
            HermesKind::Exclusive => "exclusive",
            HermesKind::Platform => "platform",
            HermesKind::ModelProvider => "model-provider",
        }
    }
}

/// A parsed Hermes manifest: plughost's [`Manifest`] plus Hermes's kind.
#[derive(Clone, Debug)]
pub struct HermesManifest {
    pub manifest: Manifest,
    pub kind: HermesKind,
}

/// The manifest file of `dir`, if it has one.
pub fn find(dir: &Path) -> Option<PathBuf> {
    MANIFEST_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
}

/// Read the manifest at `path` of the plugin directory `dir`.
pub fn load(path: &Path, dir: &Path) -> Result<HermesManifest, String> {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let root: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_saphyr::from_str(&text).map_err(|e| format!("malformed {file}: {e}"))?
    };
    let map = match root {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => {
            return Err(format!(
                "{file}: the manifest root must be a mapping, found {}",
                kind_of(&other)
            ))
        }
    };
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut warnings = Vec::new();
    let text_field = |field: &str| -> String {
        match map.get(field) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::Bool(b)) => b.to_string(),
            _ => String::new(),
        }
    };
    let manifest_version = match map.get("manifest_version") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => n.as_i64().unwrap_or(1),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(1),
        Some(_) => 1,
    };
    if manifest_version > MAX_MANIFEST_VERSION {
        warnings.push(format!(
            "manifest_version {manifest_version} is newer than Hermes's {MAX_MANIFEST_VERSION}; loading it anyway"
        ));
    }
    let explicit_kind = map.get("kind").and_then(Value::as_str).map(str::trim);
    let mut kind = match explicit_kind.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("standalone") => HermesKind::Standalone,
        Some("backend") => HermesKind::Backend,
        Some("exclusive") => HermesKind::Exclusive,
        Some("platform") => HermesKind::Platform,
        Some("model-provider") => HermesKind::ModelProvider,
        Some(other) => {
            warnings.push(format!(
                "unknown kind '{other}' (valid: backend, exclusive, model-provider, platform, standalone); treated as standalone"
            ));
            HermesKind::Standalone
        }
    };
    if !map.contains_key("kind") {
        kind = sniff_kind(dir).unwrap_or(kind);
    }
    let name = Some(text_field("name"))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or(dir_name);
    let manifest = Manifest {
        name,
        version: text_field("version"),
        manifest_version: manifest_version.max(1),
        description: text_field("description"),
        author: text_field("author"),
        kind: match kind {
            HermesKind::Backend => PluginKind::Backend,
            HermesKind::Exclusive => PluginKind::Exclusive,
            HermesKind::Platform => PluginKind::Platform,
            HermesKind::ModelProvider => PluginKind::ModelProvider,
            HermesKind::Standalone => PluginKind::Standalone,
        },
        requires_env: requires_env(map.get("requires_env")),
        provides_tools: strings(map.get("provides_tools")),
        provides_hooks: strings(map.get("provides_hooks")),
        provides_web_providers: Vec::new(),
        dialect: Default::default(),
        path: path.to_path_buf(),
        warnings,
    };
    Ok(HermesManifest { manifest, kind })
}

/// Hermes's coercion of a manifest without `kind`: a memory provider is
/// `exclusive`, a model provider `model-provider` (first 8 KiB of `__init__.py`).
fn sniff_kind(dir: &Path) -> Option<HermesKind> {
    use std::io::Read;
    let mut head = Vec::with_capacity(8192);
    std::fs::File::open(dir.join("__init__.py"))
        .ok()?
        .take(8192)
        .read_to_end(&mut head)
        .ok()?;
    let text = String::from_utf8_lossy(&head);
    if text.contains("register_memory_provider") || text.contains("MemoryProvider") {
        Some(HermesKind::Exclusive)
    } else if text.contains("register_provider") && text.contains("ProviderProfile") {
        Some(HermesKind::ModelProvider)
    } else {
        None
    }
}

/// `requires_env`: names, or `{name, description, url, secret}` mappings.
fn requires_env(value: Option<&Value>) -> Vec<RequiredEnv> {
    let entry = |v: &Value| match v {
        Value::String(s) => Some(RequiredEnv {
            name: s.clone(),
            description: String::new(),
        }),
        Value::Object(o) => o.get("name").and_then(Value::as_str).map(|n| RequiredEnv {
            name: n.to_string(),
            description: o
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }),
        _ => None,
    };
    match value {
        Some(Value::Array(items)) => items.iter().filter_map(entry).collect(),
        Some(v @ Value::String(_)) => entry(v).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}
