//! The home directory and `config.json` (`plugins.enabled` / `plugins.disabled`).
//!
//! Reads tolerate a missing file; writes keep every other key, take an
//! exclusive lock, and are atomic (temp file + rename). A file that is not
//! valid JSON, or whose plugin lists have the wrong type, is refused with
//! the file and key named and is never overwritten: a list that was ignored
//! would be replaced by the edit, losing what the user wrote.

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
    // Refused before any change: nothing of a wrong-typed file is replaced.
    let mut lists = lists_of(&doc, &path)?;
    change(&mut lists);
    let plugins = doc
        .entry("plugins")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("checked by lists_of: absent or an object");
    plugins.insert("enabled".into(), Value::from(lists.enabled.clone()));
    plugins.insert("disabled".into(), Value::from(lists.disabled.clone()));

    let mut text =
        serde_json::to_string_pretty(&Value::Object(doc)).expect("a JSON value serialises");
    text.push('\n');
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    let written = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        // A full disk must not leave a half-written temp file beside it.
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
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

/// Which plugins run in their own worker process: `plugins.isolate` in
/// `config.json` (`"all"`, `"none"`, or a list of plugin keys), the
/// `--isolate` flag, or the builder. In-process is the default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    #[default]
    None,
    All,
    Only(Vec<String>),
}

impl Isolation {
    /// Whether plugin `key` runs isolated.
    pub fn covers(&self, key: &str) -> bool {
        match self {
            Isolation::None => false,
            Isolation::All => true,
            Isolation::Only(keys) => keys.iter().any(|k| k == key),
        }
    }

    /// Parse `all`, `none`, or `KEY[,KEY…]` (the `--isolate` flag).
    pub fn parse(text: &str) -> Result<Isolation, String> {
        match text.trim() {
            "all" => Ok(Isolation::All),
            "none" => Ok(Isolation::None),
            "" => Err("expected all, none, or plugin keys separated by commas".into()),
            list => {
                let keys: Vec<String> = list.split(',').map(|k| k.trim().to_string()).collect();
                if keys.iter().any(|k| k.is_empty()) {
                    return Err(format!(
                        "'{list}' has an empty plugin key; write keys separated by commas, such as demo,weather"
                    ));
                }
                Ok(Isolation::Only(keys))
            }
        }
    }
}

/// `plugins.isolate` of `config.json` (none when absent).
pub fn read_isolation(home: &Path) -> Result<Isolation, ConfigError> {
    let path = config_path(home);
    let doc = read_document(&path)?;
    isolation_of(&doc, &path)
}

fn isolation_of(doc: &Map<String, Value>, path: &Path) -> Result<Isolation, ConfigError> {
    let Some(Value::Object(plugins)) = doc.get("plugins") else {
        return Ok(Isolation::None);
    };
    let expected = "\"all\", \"none\", or a list of plugin names such as [\"demo\"]";
    let wrong = |key: String, found: &Value| ConfigError::WrongType {
        path: path.to_path_buf(),
        key,
        expected,
        found: json_type(found),
    };
    match plugins.get("isolate") {
        None | Some(Value::Null) => Ok(Isolation::None),
        Some(Value::String(s)) if s == "all" => Ok(Isolation::All),
        Some(Value::String(s)) if s == "none" => Ok(Isolation::None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(wrong(format!("plugins.isolate[{i}]"), other)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Isolation::Only),
        Some(other) => Err(wrong("plugins.isolate".into(), other)),
    }
}

/// OS resource limits of one isolated plugin's worker (`plugins.limits`
/// in `config.json`); `None` leaves a resource unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceLimits {
    /// How large its heap (data segment) may grow, in MiB.
    pub memory_mb: Option<u64>,
    /// How much CPU time one call may use, in seconds.
    pub cpu_seconds: Option<u64>,
}

/// `plugins.limits`: limits by plugin key, `"*"` for every isolated
/// plugin (a key's own entry wins field by field).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitTable(pub std::collections::BTreeMap<String, ResourceLimits>);

impl LimitTable {
    /// The limits that apply to plugin `key`.
    pub fn for_plugin(&self, key: &str) -> ResourceLimits {
        let all = self.0.get("*").copied().unwrap_or_default();
        let own = self.0.get(key).copied().unwrap_or_default();
        ResourceLimits {
            memory_mb: own.memory_mb.or(all.memory_mb),
            cpu_seconds: own.cpu_seconds.or(all.cpu_seconds),
        }
    }
}

/// `plugins.limits` of `config.json` (none when absent).
pub fn read_limits(home: &Path) -> Result<LimitTable, ConfigError> {
    let path = config_path(home);
    let doc = read_document(&path)?;
    limits_of(&doc, &path)
}

fn limits_of(doc: &Map<String, Value>, path: &Path) -> Result<LimitTable, ConfigError> {
    let limits = match doc.get("plugins").and_then(|p| p.get("limits")) {
        None | Some(Value::Null) => return Ok(LimitTable::default()),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(ConfigError::WrongType {
                path: path.to_path_buf(),
                key: "plugins.limits".into(),
                expected: "an object of plugin keys (or \"*\") to limits, such as {\"demo\": {\"memory_mb\": 512, \"cpu_seconds\": 30}}",
                found: json_type(other),
            })
        }
    };
    let mut table = LimitTable::default();
    for (plugin, entry) in limits {
        let at = format!("plugins.limits.{plugin}");
        let Value::Object(fields) = entry else {
            return Err(ConfigError::WrongType {
                path: path.to_path_buf(),
                key: at,
                expected: "an object such as {\"memory_mb\": 512, \"cpu_seconds\": 30}",
                found: json_type(entry),
            });
        };
        let mut limits = ResourceLimits::default();
        for (name, value) in fields {
            let slot = match name.as_str() {
                "memory_mb" => &mut limits.memory_mb,
                "cpu_seconds" => &mut limits.cpu_seconds,
                _ => {
                    return Err(ConfigError::UnknownKey {
                        path: path.to_path_buf(),
                        key: format!("{at}.{name}"),
                        known: "memory_mb or cpu_seconds",
                    })
                }
            };
            *slot = match value {
                Value::Null => None,
                Value::Number(n) if n.as_u64().is_some_and(|n| n > 0) => n.as_u64(),
                other => {
                    return Err(ConfigError::WrongType {
                        path: path.to_path_buf(),
                        key: format!("{at}.{name}"),
                        expected: "a whole number above 0",
                        found: json_type(other),
                    })
                }
            };
        }
        table.0.insert(plugin.clone(), limits);
    }
    Ok(table)
}

#[cfg(test)]
mod isolation_tests {
    use super::*;

    #[test]
    fn isolate_is_read_from_config_and_parsed_from_the_flag() {
        let path = Path::new("config.json");
        let doc = |t: &str| parse_document(t, path).unwrap();
        assert_eq!(isolation_of(&doc("{}"), path).unwrap(), Isolation::None);
        assert_eq!(
            isolation_of(&doc(r#"{"plugins": {"isolate": "all"}}"#), path).unwrap(),
            Isolation::All
        );
        assert_eq!(
            isolation_of(&doc(r#"{"plugins": {"isolate": ["a", "b"]}}"#), path).unwrap(),
            Isolation::Only(vec!["a".into(), "b".into()])
        );
        let err = isolation_of(&doc(r#"{"plugins": {"isolate": "some"}}"#), path).unwrap_err();
        assert!(err.to_string().contains("plugins.isolate"), "{err}");
        let err = isolation_of(&doc(r#"{"plugins": {"isolate": [1]}}"#), path).unwrap_err();
        assert!(err.to_string().contains("plugins.isolate[0]"), "{err}");
        assert_eq!(Isolation::parse("all"), Ok(Isolation::All));
        assert_eq!(Isolation::parse("none"), Ok(Isolation::None));
        assert_eq!(
            Isolation::parse("a, b"),
            Ok(Isolation::Only(vec!["a".into(), "b".into()]))
        );
        assert!(Isolation::parse("a,,b").is_err());
        assert!(Isolation::parse("").is_err());
        assert!(Isolation::All.covers("x") && !Isolation::None.covers("x"));
    }

    #[test]
    fn limits_are_read_per_plugin_with_a_default_and_bad_values_are_refused() {
        let path = Path::new("/x/config.json");
        let doc = |t: &str| parse_document(t, path).unwrap();
        assert_eq!(limits_of(&doc("{}"), path).unwrap(), LimitTable::default());
        let table = limits_of(
            &doc(
                r#"{"plugins": {"limits": {"*": {"memory_mb": 512}, "hog": {"cpu_seconds": 2}}}}"#,
            ),
            path,
        )
        .unwrap();
        let hog = table.for_plugin("hog");
        assert_eq!((hog.memory_mb, hog.cpu_seconds), (Some(512), Some(2)));
        let other = table.for_plugin("other");
        assert_eq!((other.memory_mb, other.cpu_seconds), (Some(512), None));
        for (bad, named) in [
            (r#"{"plugins": {"limits": 3}}"#, "plugins.limits"),
            (r#"{"plugins": {"limits": {"a": 3}}}"#, "plugins.limits.a"),
            (
                r#"{"plugins": {"limits": {"a": {"memory_mb": 0}}}}"#,
                "plugins.limits.a.memory_mb",
            ),
            (
                r#"{"plugins": {"limits": {"a": {"cpu_seconds": 1.5}}}}"#,
                "plugins.limits.a.cpu_seconds",
            ),
            (
                r#"{"plugins": {"limits": {"a": {"memory": 5}}}}"#,
                "plugins.limits.a.memory",
            ),
        ] {
            let err = limits_of(&doc(bad), path).unwrap_err().to_string();
            assert!(err.contains(&format!("`{named}`")), "{bad}: {err}");
        }
    }
}

/// `plugins.dialects` of `config.json`: plugin key → the plugin API it is
/// loaded through (`flowly`, `hermes`, …), chosen by the user or recorded by
/// `plugins install --dialect`. It overrides every other rule.
pub fn read_dialects(
    home: &Path,
) -> Result<std::collections::BTreeMap<String, String>, ConfigError> {
    let path = config_path(home);
    dialects_of(&read_document(&path)?, &path)
}

fn dialects_of(
    doc: &Map<String, Value>,
    path: &Path,
) -> Result<std::collections::BTreeMap<String, String>, ConfigError> {
    let Some(Value::Object(plugins)) = doc.get("plugins") else {
        return Ok(Default::default());
    };
    let wrong = |key: String, expected: &'static str, found: &Value| ConfigError::WrongType {
        path: path.to_path_buf(),
        key,
        expected,
        found: json_type(found),
    };
    match plugins.get("dialects") {
        None | Some(Value::Null) => Ok(Default::default()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(key, v)| match v {
                Value::String(s) => Ok((key.clone(), s.trim().to_string())),
                other => Err(wrong(
                    format!("plugins.dialects.{key}"),
                    "a dialect name such as \"hermes\"",
                    other,
                )),
            })
            .collect(),
        Some(other) => Err(wrong(
            "plugins.dialects".into(),
            "an object mapping plugin names to dialects, such as {\"demo\": \"hermes\"}",
            other,
        )),
    }
}

/// Record `plugins.dialects.<key> = dialect`, keeping every other key
/// (locked and atomic, as [`update_plugin_lists`]).
pub fn set_dialect(home: &Path, key: &str, dialect: &str) -> Result<(), ConfigError> {
    let path = config_path(home);
    // Refuse a file whose dialects map is malformed before touching it.
    dialects_of(&read_document(&path)?, &path)?;
    update_document(home, |doc| {
        let plugins = doc
            .entry("plugins")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(plugins) = plugins {
            let dialects = plugins
                .entry("dialects")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(dialects) = dialects {
                dialects.insert(key.to_string(), Value::String(dialect.to_string()));
            }
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
    std::fs::create_dir_all(home).map_err(io)?;
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(home.join(".config.lock"))
        .map_err(io)?;
    lock_file.lock().map_err(io)?;
    let mut doc = read_document(&path)?;
    lists_of(&doc, &path)?;
    change(&mut doc);
    let mut text =
        serde_json::to_string_pretty(&Value::Object(doc)).expect("a JSON value serialises");
    text.push('\n');
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    let written = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    drop(lock_file);
    Ok(())
}

#[cfg(test)]
mod dialect_tests {
    use super::*;

    #[test]
    fn dialects_are_read_checked_and_recorded() {
        let path = Path::new("config.json");
        let doc = |t: &str| parse_document(t, path).unwrap();
        assert!(dialects_of(&doc("{}"), path).unwrap().is_empty());
        let d = dialects_of(&doc(r#"{"plugins": {"dialects": {"a": "hermes"}}}"#), path).unwrap();
        assert_eq!(d.get("a").map(String::as_str), Some("hermes"));
        let err = dialects_of(&doc(r#"{"plugins": {"dialects": {"a": 1}}}"#), path).unwrap_err();
        assert!(err.to_string().contains("plugins.dialects.a"), "{err}");
        let err = dialects_of(&doc(r#"{"plugins": {"dialects": []}}"#), path).unwrap_err();
        assert!(err.to_string().contains("`plugins.dialects`"), "{err}");

        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            config_path(home.path()),
            r#"{"model": "m", "plugins": {"enabled": ["a"]}}"#,
        )
        .unwrap();
        set_dialect(home.path(), "a", "hermes").unwrap();
        enable_plugin(home.path(), "b").unwrap();
        let d = read_dialects(home.path()).unwrap();
        assert_eq!(d.get("a").map(String::as_str), Some("hermes"));
        let lists = read_plugin_lists(home.path()).unwrap();
        assert_eq!(lists.enabled, vec!["a", "b"]);
        let text = std::fs::read_to_string(config_path(home.path())).unwrap();
        assert!(text.contains("\"model\": \"m\""), "{text}");
    }
}
