//! `plugins.dialects` of `config.json`: the plugin API a plugin key is loaded through.

use std::path::Path;

use serde_json::{Map, Value};

use super::{config_path, json_type, read_document, update_document, ConfigError};

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
/// (locked and atomic, as [`update_plugin_lists`](super::update_plugin_lists)).
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

#[cfg(test)]
mod dialect_tests {
    use super::*;
    use crate::plugins::config::{enable_plugin, parse_document, read_plugin_lists};

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
