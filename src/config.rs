//! The home directory and `config.json` (`plugins.enabled` / `plugins.disabled`).
//!
//! Reads tolerate a missing file; writes keep every other key, take an
//! exclusive lock, and are atomic (temp file + rename). A file that is not
//! valid JSON is never overwritten.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

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
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
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
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => {
            return Err(ConfigError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        }
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&text) {
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

fn string_list(doc: &Map<String, Value>, key: &str) -> Vec<String> {
    doc.get("plugins")
        .and_then(|p| p.get(key))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Read the plugin lists (empty when the file does not exist).
pub fn read_plugin_lists(home: &Path) -> Result<PluginLists, ConfigError> {
    let doc = read_document(&config_path(home))?;
    Ok(PluginLists {
        enabled: string_list(&doc, "enabled"),
        disabled: string_list(&doc, "disabled"),
    })
}

/// Change the plugin lists under an exclusive lock and write the file back
/// atomically, keeping every other key. Returns the lists as written.
pub fn update_plugin_lists(
    home: &Path,
    change: impl FnOnce(&mut PluginLists),
) -> Result<PluginLists, ConfigError> {
    let path = config_path(home);
    let io = |e: std::io::Error| ConfigError::Io {
        path: path.clone(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(home).map_err(io)?;
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(home.join(".config.lock"))
        .map_err(io)?;
    lock_file.lock().map_err(io)?;

    let mut doc = read_document(&path)?;
    let mut lists = PluginLists {
        enabled: string_list(&doc, "enabled"),
        disabled: string_list(&doc, "disabled"),
    };
    change(&mut lists);
    let plugins = doc
        .entry("plugins")
        .or_insert_with(|| Value::Object(Map::new()));
    if !plugins.is_object() {
        *plugins = Value::Object(Map::new());
    }
    let plugins = plugins.as_object_mut().expect("just made an object");
    plugins.insert("enabled".into(), Value::from(lists.enabled.clone()));
    plugins.insert("disabled".into(), Value::from(lists.disabled.clone()));

    let mut text =
        serde_json::to_string_pretty(&Value::Object(doc)).expect("a JSON value serialises");
    text.push('\n');
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    {
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, &path).map_err(io)?;
    drop(lock_file);
    Ok(lists)
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
