//! `plugins.isolate` and `plugins.limits`: which plugins run in a worker, under which limits.

use std::path::Path;

use serde_json::{Map, Value};

use super::{config_path, json_type, read_document, ConfigError};

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
    use crate::plugins::config::parse_document;

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

/// What `config.json` says about where plugins run, as written: whether
/// `plugins.isolate` is set at all (unset, the host's default applies:
/// the long-running hosts isolate third-party plugins), which plugins are
/// trusted to run in-process (`plugins.trusted`), and how long a plugin's
/// `register()` may take (`plugins.load_timeout_seconds`, Hermes's key).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IsolationChoice {
    pub isolate: Option<Isolation>,
    pub trusted: Vec<String>,
    pub load_timeout_seconds: Option<f64>,
}

/// [`IsolationChoice`] of the home's `config.json`.
pub fn read_isolation_choice(home: &Path) -> Result<IsolationChoice, ConfigError> {
    let path = config_path(home);
    let doc = read_document(&path)?;
    let Some(Value::Object(plugins)) = doc.get("plugins") else {
        return Ok(IsolationChoice::default());
    };
    let isolate = match plugins.get("isolate") {
        None | Some(Value::Null) => None,
        Some(_) => Some(isolation_of(&doc, &path)?),
    };
    let wrong = |key: &str, expected: &'static str, found: &Value| ConfigError::WrongType {
        path: path.clone(),
        key: key.to_string(),
        expected,
        found: json_type(found),
    };
    let trusted = match plugins.get("trusted") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(wrong("plugins.trusted", "a list of plugin names", other)),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(wrong("plugins.trusted", "a list of plugin names", other)),
    };
    let load_timeout_seconds = match plugins.get("load_timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_f64().is_some_and(|s| s > 0.0 && s.is_finite()) => {
            n.as_f64()
        }
        Some(other) => {
            return Err(wrong(
                "plugins.load_timeout_seconds",
                "a positive number of seconds",
                other,
            ))
        }
    };
    // (unset here: Hermes's config.yaml's plugins.load_timeout_seconds)
    let load_timeout_seconds =
        load_timeout_seconds.or_else(|| super::hermes_yaml::read().load_timeout_seconds);
    Ok(IsolationChoice {
        isolate,
        trusted,
        load_timeout_seconds,
    })
}
