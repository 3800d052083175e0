//! A plugin's options asked for at install (a Claude Code plugin's
//! `userConfig`): which ones still need a value, and what to tell a user
//! who is not at a terminal. The dialect says what options a plugin has
//! (`PluginFormat::user_options`); `plugins install` asks for the missing
//! ones on a terminal and records them in `config.json`
//! (`plugins.user_config.<plugin>.<key>`), where the plugin reads them.

use std::path::Path;

use crate::plugins::config::{read_user_options, ConfigError};

/// One option a plugin declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserOption {
    pub key: String,
    /// What to ask (its `title`, else its `description`, else its key).
    pub prompt: String,
    /// Its value is a secret: never echoed, never printed.
    pub sensitive: bool,
    /// It has a default the plugin falls back on.
    pub has_default: bool,
    /// The environment variable that also gives its value.
    pub env_var: Option<String>,
}

/// The options of `plugin` with no value yet: none in `config.json`, none
/// in the environment, no default.
pub fn missing(
    home: &Path,
    plugin: &str,
    options: &[UserOption],
) -> Result<Vec<UserOption>, ConfigError> {
    let set = read_user_options(home, plugin)?;
    Ok(options
        .iter()
        .filter(|o| !o.has_default)
        .filter(|o| set.get(&o.key).is_none_or(serde_json::Value::is_null))
        .filter(|o| {
            o.env_var
                .as_ref()
                .is_none_or(|v| std::env::var_os(v).is_none())
        })
        .cloned()
        .collect())
}

/// What `plugins install` says when it cannot ask (no terminal): each
/// option and how to set it.
pub fn instructions(plugin: &str, missing: &[UserOption]) -> String {
    let mut text = format!(
        "Plugin '{plugin}' has options without a value; what uses them fails until they are set. Set them in config.json under plugins.user_config.{plugin}:"
    );
    for o in missing {
        let secret = if o.sensitive { ", a secret" } else { "" };
        let env = o
            .env_var
            .as_ref()
            .map(|v| format!(" (or the environment variable {v})"))
            .unwrap_or_default();
        text.push_str(&format!(
            "\n  {}: {}{secret}{env}: {{\"plugins\": {{\"user_config\": {{\"{plugin}\": {{\"{}\": \"…\"}}}}}}}}",
            o.key, o.prompt, o.key
        ));
    }
    text.push_str("\nOr run plughost plugins install again from a terminal to be asked for them.");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(key: &str, has_default: bool) -> UserOption {
        UserOption {
            key: key.into(),
            prompt: format!("the {key}"),
            sensitive: key == "token",
            has_default,
            env_var: Some(format!("PLUGHOST_TEST_UNSET_OPTION_{}", key.to_uppercase())),
        }
    }

    #[test]
    fn an_option_set_in_config_json_or_with_a_default_is_not_missing() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.json"),
            r#"{"plugins": {"user_config": {"kit": {"region": "eu"}}}}"#,
        )
        .unwrap();
        let options = [
            option("token", false),
            option("region", false),
            option("size", true),
        ];
        let left = missing(home.path(), "kit", &options).unwrap();
        assert_eq!(left, [option("token", false)]);
        let said = instructions("kit", &left);
        assert!(said.contains("plugins.user_config.kit"), "{said}");
        assert!(said.contains("token: the token, a secret"), "{said}");
        assert!(said.contains("PLUGHOST_TEST_UNSET_OPTION_TOKEN"), "{said}");
    }
}
