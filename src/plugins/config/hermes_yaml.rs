//! Hermes's operator settings for plugins, read from Hermes's own
//! `config.yaml` (in the Hermes home: `$HERMES_HOME`, else `~/.hermes`),
//! so an operator who tuned Hermes gets the same behaviour from plughost:
//!
//! - `plugins.hook_callback_timeout`: seconds a hook callback may take
//!   (Hermes's default 30; `0` turns the bound off; a negative or
//!   non-numeric value is warned about and the default kept; more than
//!   600 is clamped to 600, as Hermes's `_resolve_hook_callback_timeout`);
//! - `plugins.strict_hooks`: refuse a plugin that registers what its
//!   manifest does not declare (a boolean);
//! - `plugins.load_timeout_seconds`: how long `register()` may take
//!   (a positive number).
//!
//! plughost's own settings win: `config.json`'s keys of the same names,
//! and `--hook-timeout`. A missing file sets nothing; a file that is not
//! valid YAML, or a value of the wrong type, is warned about (naming the
//! file and the key) and sets nothing: never fatal.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// Hermes's default hook callback budget (`_HOOK_CALLBACK_TIMEOUT_SECS`).
pub const DEFAULT_HOOK_CALLBACK_TIMEOUT: Duration = Duration::from_secs(30);

/// Hermes's ceiling on `plugins.hook_callback_timeout`.
pub const MAX_HOOK_CALLBACK_TIMEOUT_SECS: f64 = 600.0;

/// The settings `config.yaml` sets (`None`: not set there, or not usable).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HermesPluginSettings {
    /// `Some(None)`: set to 0, no bound.
    pub hook_callback_timeout: Option<Option<Duration>>,
    pub strict_hooks: Option<bool>,
    pub load_timeout_seconds: Option<f64>,
}

/// Hermes's home: `$HERMES_HOME`, else `~/.hermes`.
pub fn hermes_home() -> PathBuf {
    if let Some(home) = std::env::var("HERMES_HOME")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
    {
        return PathBuf::from(home);
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .or_else(std::env::home_dir)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".hermes")
}

/// The settings of the Hermes home's `config.yaml`.
pub fn read() -> HermesPluginSettings {
    read_in(&hermes_home())
}

/// The settings of `<hermes_home>/config.yaml`.
pub fn read_in(hermes_home: &Path) -> HermesPluginSettings {
    let path = hermes_home.join("config.yaml");
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => HermesPluginSettings::default(),
        Err(e) => {
            tracing::warn!(
                "cannot read {} ({e}); its plugins.* operator settings are ignored",
                path.display()
            );
            HermesPluginSettings::default()
        }
    }
}

/// The settings of a `config.yaml` text (`path` names it in warnings).
pub fn parse(text: &str, path: &Path) -> HermesPluginSettings {
    if text.trim().is_empty() {
        return HermesPluginSettings::default();
    }
    let doc: Value = match serde_saphyr::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(
                "{} is not valid YAML ({e}); its plugins.hook_callback_timeout, plugins.strict_hooks and plugins.load_timeout_seconds are ignored — fix it",
                path.display()
            );
            return HermesPluginSettings::default();
        }
    };
    // A `plugins` that is not a mapping is reported with the plugin lists.
    let Some(Value::Object(plugins)) = doc.get("plugins") else {
        return HermesPluginSettings::default();
    };
    let warn = |key: &str, what: &str, found: &Value| {
        tracing::warn!(
            "{}: plugins.{key} must be {what} (found {found}); ignored",
            path.display()
        )
    };
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let hook_callback_timeout = match plugins.get("hook_callback_timeout") {
        None | Some(Value::Null) => None,
        Some(v) => match number(v).filter(|s| s.is_finite()) {
            None => {
                warn("hook_callback_timeout", "a number of seconds", v);
                None
            }
            Some(s) if s < 0.0 => {
                warn("hook_callback_timeout", "0 or more seconds", v);
                None
            }
            Some(0.0) => Some(None),
            Some(s) => {
                let s = if s > MAX_HOOK_CALLBACK_TIMEOUT_SECS {
                    tracing::warn!(
                        "{}: plugins.hook_callback_timeout={s} exceeds the maximum of {MAX_HOOK_CALLBACK_TIMEOUT_SECS} s; clamping",
                        path.display()
                    );
                    MAX_HOOK_CALLBACK_TIMEOUT_SECS
                } else {
                    s
                };
                Some(Some(Duration::from_secs_f64(s)))
            }
        },
    };
    let strict_hooks = match plugins.get("strict_hooks") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            warn("strict_hooks", "true or false", v);
            None
        }
    };
    let load_timeout_seconds = match plugins.get("load_timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => match number(v).filter(|s| *s > 0.0 && s.is_finite()) {
            Some(s) => Some(s),
            None => {
                warn("load_timeout_seconds", "a positive number of seconds", v);
                None
            }
        },
    };
    HermesPluginSettings {
        hook_callback_timeout,
        strict_hooks,
        load_timeout_seconds,
    }
}

/// The hook budget of a host whose `--hook-timeout` is `flag`: the flag,
/// else Hermes's `plugins.hook_callback_timeout` (`None`: unbounded),
/// else [`DEFAULT_HOOK_CALLBACK_TIMEOUT`].
pub fn hook_timeout(flag: Option<Duration>) -> Option<Duration> {
    match flag {
        Some(d) => Some(d),
        None => read()
            .hook_callback_timeout
            .unwrap_or(Some(DEFAULT_HOOK_CALLBACK_TIMEOUT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> HermesPluginSettings {
        parse(text, Path::new("config.yaml"))
    }

    #[test]
    fn hermes_rules() {
        let s = p("plugins:\n  hook_callback_timeout: 2.5\n  strict_hooks: true\n  load_timeout_seconds: 4\n");
        assert_eq!(
            s.hook_callback_timeout,
            Some(Some(Duration::from_millis(2500)))
        );
        assert_eq!(s.strict_hooks, Some(true));
        assert_eq!(s.load_timeout_seconds, Some(4.0));
        assert_eq!(
            p("plugins:\n  hook_callback_timeout: 0\n").hook_callback_timeout,
            Some(None)
        );
        assert_eq!(
            p("plugins:\n  hook_callback_timeout: 9000\n").hook_callback_timeout,
            Some(Some(Duration::from_secs(600)))
        );
        let bad = p("plugins:\n  hook_callback_timeout: -1\n  strict_hooks: yes-please\n  load_timeout_seconds: 0\n");
        assert_eq!(bad, HermesPluginSettings::default());
        assert_eq!(p("plugins: [\n"), HermesPluginSettings::default());
        assert_eq!(p("model: x\n"), HermesPluginSettings::default());
    }
}
