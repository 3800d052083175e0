//! `plugins.user_config.<plugin>.<key>`: the values of a plugin's options
//! (a Claude Code plugin's `userConfig`), asked for at install or written
//! by the user.

use std::path::Path;

use serde_json::{Map, Value};

use super::{config_path, json_type, read_document, update_document, ConfigError};

/// The values `config.json` holds for `plugin`'s options (none when unset).
pub fn read_user_options(home: &Path, plugin: &str) -> Result<Map<String, Value>, ConfigError> {
    let path = config_path(home);
    let doc = read_document(&path)?;
    match doc
        .get("plugins")
        .and_then(|p| p.get("user_config"))
        .and_then(|u| u.get(plugin))
    {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(values)) => Ok(values.clone()),
        Some(other) => Err(ConfigError::WrongType {
            path,
            key: format!("plugins.user_config.{plugin}"),
            expected: "an object of option values",
            found: json_type(other),
        }),
    }
}

/// Record `plugins.user_config.<plugin>.<key> = value`, keeping every
/// other key (locked and atomic, as the plugin lists are written).
pub fn set_user_option(
    home: &Path,
    plugin: &str,
    key: &str,
    value: &str,
) -> Result<(), ConfigError> {
    // A malformed section is refused before anything is written.
    read_user_options(home, plugin)?;
    update_document(home, |doc| {
        let section = ["plugins", "user_config", plugin]
            .into_iter()
            .try_fold(doc, |map, name| {
                map.entry(name)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
            });
        if let Some(values) = section {
            values.insert(key.to_string(), Value::String(value.to_string()));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_is_written_beside_the_rest_and_read_back() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.json"),
            r#"{"plugins": {"enabled": ["a"]}, "other": 1}"#,
        )
        .unwrap();
        set_user_option(home.path(), "kit", "token", "s3").unwrap();
        set_user_option(home.path(), "kit", "region", "eu").unwrap();
        let values = read_user_options(home.path(), "kit").unwrap();
        assert_eq!(values["token"], "s3");
        assert_eq!(values["region"], "eu");
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(home.path().join("config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(doc["other"], 1);
        assert_eq!(doc["plugins"]["enabled"][0], "a");
    }

    #[test]
    fn a_malformed_section_is_refused_naming_it() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.json"),
            r#"{"plugins": {"user_config": {"kit": 3}}}"#,
        )
        .unwrap();
        let e = set_user_option(home.path(), "kit", "token", "x").unwrap_err();
        assert!(e.to_string().contains("plugins.user_config.kit"), "{e}");
    }
}
