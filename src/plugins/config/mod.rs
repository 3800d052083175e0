//! The home directory and `config.json` (`plugins.enabled` / `plugins.disabled`).
//!
//! Reads tolerate a missing file; writes keep every other key, take an
//! exclusive lock, and are atomic (temp file + rename). A file that is not
//! valid JSON, or whose plugin lists have the wrong type, is refused with
//! the file and key named and is never overwritten: a list that was ignored
//! would be replaced by the edit, losing what the user wrote.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

mod dialects;
mod isolation;
mod mcp;
// --- issue 50: plugins.entries.<key>.sandbox ---
mod sandbox;
// --- issue 48: userConfig options asked for at install ---
mod user_config;

pub use dialects::{read_dialects, set_dialect};
pub use isolation::{read_isolation, read_limits, Isolation, LimitTable, ResourceLimits};
pub use isolation::{read_isolation_choice, IsolationChoice};
pub use mcp::{
    parse_server, read_mcp_allowlist, read_mcp_servers, DeclaredMcpServers, MapError,
    McpServerSpec, McpTransport, CONFIG_OWNER, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
};
pub use sandbox::{
    dialect_home, read_sandbox, NetworkRule, SandboxRules, SandboxSetting, SandboxedAs,
};
pub use user_config::{read_user_options, set_user_option};
// (Hermes's plugins.* operator settings from its config.yaml)
pub mod hermes_yaml;

/// Resolve the home: an explicit path, else `$PLUGHOST_HOME`, else `~/.plughost`.
pub fn resolve_home(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("PLUGHOST_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("HOME")
        .map(PathBuf::from)
        .or_else(std::env::home_dir)
        .unwrap_or_else(|| PathBuf::from("."));
    base.join(".plughost")
}

/// `true` for the usual spellings of yes (1/true/yes/on, any case).
pub fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// Problems with `config.json`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path} is not valid JSON (line {line}, column {column}: {message}); fix or remove it — it was left untouched")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: the top level must be a JSON object; fix it — it was left untouched")]
    NotAnObject { path: PathBuf },
    #[error("{path}: `{key}` must be {expected}, found {found}; fix it — it was left untouched")]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}: `{key}` is not a setting plughost knows (expected {known}); fix it — it was left untouched")]
    UnknownKey {
        path: PathBuf,
        key: String,
        known: &'static str,
    },
}

/// The plugin lists of `config.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginLists {
    pub enabled: Vec<String>,
    pub disabled: Vec<String>,
}

/// `<home>/config.json`.
pub fn config_path(home: &Path) -> PathBuf {
    home.join("config.json")
}

fn read_document(path: &Path) -> Result<Map<String, Value>, ConfigError> {
    // A special file (a FIFO) is refused, never opened for a blocking read.
    let text = match crate::plugins::atomic::read_regular(path)
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
    {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => {
            return Err(ConfigError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        }
    };
    parse_document(&text, path)
}

/// Parse the text of `config.json` (`path` names it in errors); blank
/// text is an empty document.
fn parse_document(text: &str, path: &Path) -> Result<Map<String, Value>, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ConfigError::NotAnObject {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e
                .to_string()
                .split(" at line")
                .next()
                .unwrap_or_default()
                .to_string(),
        }),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The plugin lists of a parsed document: `plugins` absent, or an object
/// whose `enabled` and `disabled` are absent or lists of strings.
fn lists_of(doc: &Map<String, Value>, path: &Path) -> Result<PluginLists, ConfigError> {
    let wrong = |key: String, expected: &'static str, found: &Value| ConfigError::WrongType {
        path: path.to_path_buf(),
        key,
        expected,
        found: json_type(found),
    };
    let plugins = match doc.get("plugins") {
        None => return Ok(PluginLists::default()),
        Some(Value::Object(p)) => p,
        Some(other) => {
            return Err(wrong(
                "plugins".into(),
                "an object such as {\"enabled\": [], \"disabled\": []}",
                other,
            ))
        }
    };
    let list = |key: &str| -> Result<Vec<String>, ConfigError> {
        match plugins.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(wrong(
                        format!("plugins.{key}[{i}]"),
                        "a plugin name (a string)",
                        other,
                    )),
                })
                .collect(),
            Some(other) => Err(wrong(
                format!("plugins.{key}"),
                "a list of plugin names such as [\"demo\"]",
                other,
            )),
        }
    };
    Ok(PluginLists {
        enabled: list("enabled")?,
        disabled: list("disabled")?,
    })
}

/// Parse the text of a `config.json` into its plugin lists, checking their
/// types; `path` names the file in errors.
pub fn parse_plugin_lists(text: &str, path: &Path) -> Result<PluginLists, ConfigError> {
    lists_of(&parse_document(text, path)?, path)
}

/// Read the plugin lists (empty when the file does not exist).
pub fn read_plugin_lists(home: &Path) -> Result<PluginLists, ConfigError> {
    let path = config_path(home);
    lists_of(&read_document(&path)?, &path)
}

/// Change the plugin lists under an exclusive lock and write the file back
/// atomically, keeping every other key. Returns the lists as written.
pub fn update_plugin_lists(
    home: &Path,
    change: impl FnOnce(&mut PluginLists),
) -> Result<PluginLists, ConfigError> {
    let path = config_path(home);
    let mut written = None;
    update_document(home, |doc| {
        let mut lists = lists_of(doc, &path).expect("checked by update_document");
        change(&mut lists);
        let plugins = doc
            .entry("plugins")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .expect("checked by lists_of: absent or an object");
        plugins.insert("enabled".into(), Value::from(lists.enabled.clone()));
        plugins.insert("disabled".into(), Value::from(lists.disabled.clone()));
        written = Some(lists);
    })?;
    Ok(written.expect("update_document ran the change"))
}

/// Add `name` to `plugins.enabled` and take it out of `plugins.disabled`.
pub fn enable_plugin(home: &Path, name: &str) -> Result<PluginLists, ConfigError> {
    update_plugin_lists(home, |l| {
        l.disabled.retain(|n| n != name);
        if !l.enabled.iter().any(|n| n == name) {
            l.enabled.push(name.to_string());
        }
    })
}

/// Add `name` to `plugins.disabled` and take it out of `plugins.enabled`.
pub fn disable_plugin(home: &Path, name: &str) -> Result<PluginLists, ConfigError> {
    update_plugin_lists(home, |l| {
        l.enabled.retain(|n| n != name);
        if !l.disabled.iter().any(|n| n == name) {
            l.disabled.push(name.to_string());
        }
    })
}

/// Edit the whole document under the config lock, written back atomically.
fn update_document(
    home: &Path,
    change: impl FnOnce(&mut Map<String, Value>),
) -> Result<(), ConfigError> {
    let path = config_path(home);
    let io = |e: std::io::Error| ConfigError::Io {
        path: path.clone(),
        message: e.to_string(),
    };
    let _held = crate::plugins::atomic::lock(home, ".config.lock").map_err(io)?;
    let mut doc = read_document(&path)?;
    // Refused before any change: nothing of a wrong-typed file is replaced.
    lists_of(&doc, &path)?;
    change(&mut doc);
    let mut text =
        serde_json::to_string_pretty(&Value::Object(doc)).expect("a JSON value serialises");
    text.push('\n');
    crate::plugins::atomic::replace(&path, &text).map_err(io)
}
