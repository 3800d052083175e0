//! `plugins.entries.<key>.sandbox`: how the kernel confines an isolated
//! plugin's worker (issue 50; the mechanisms are
//! `crate::isolation::sandbox`, the threat model docs/security.md).
//!
//! ```json
//! {"plugins": {"entries": {"weather": {"sandbox": {
//!     "network": "none", "memory_mb": 256,
//!     "read": ["~/datasets"], "write": ["/srv/weather-cache"]}}}}}
//! ```
//!
//! Absent (or `true`, or `{}`) is the default confinement; `false` switches
//! it off for that plugin. `network` is `"any"` (the default), `"none"`, or
//! a list of hosts (`"api.example.com"`, `"*.example.org"`,
//! `"127.0.0.1:8080"`). `read` / `write` add paths to the defaults: `~` is
//! the user's home, a relative path is taken from plughost's home.
//! `unix_sockets: true` lets the plugin open Unix sockets (a browser it
//! drives needs them; refused by default).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{config_path, json_type, read_document, ConfigError};

/// Where a confined plugin may connect.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkRule {
    /// No confinement of the network.
    #[default]
    Any,
    /// No connection at all, loopback included.
    None,
    /// Only these hosts (`host`, `*.domain`, `host:port`).
    Hosts(Vec<String>),
}

/// The plugin whose confinement a process it did not start itself runs
/// under: an isolated bundle's MCP servers, which plughost starts (not the
/// plugin's worker), confined by the rules of the plugin at `dir`
/// (`crate::mcp_client` hands it to `crate::isolation::sandbox`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxedAs {
    /// The plugin's key (its `plugins.entries.<key>.sandbox`).
    pub key: String,
    /// Its directory (readable by what runs confined as it).
    pub dir: PathBuf,
    /// Its dialect's name (which dialect home it may write).
    pub dialect: String,
}

/// The rules of one plugin's sandbox as `config.json` writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxRules {
    pub network: NetworkRule,
    /// Caps the worker's memory (as `plugins.limits`' `memory_mb`; the
    /// lower of the two applies).
    pub memory_mb: Option<u64>,
    /// Paths added to the default read set.
    pub read: Vec<PathBuf>,
    /// Paths added to the default write set (readable too).
    pub write: Vec<PathBuf>,
    /// Let the plugin open Unix sockets (refused by default: a daemon's
    /// socket — docker's, an SSH agent's — is a way around the rest).
    pub unix_sockets: bool,
}

/// `plugins.entries.<key>.sandbox`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxSetting {
    /// `"sandbox": false`: the worker runs unconfined.
    Off,
    /// The default confinement plus these rules.
    On(SandboxRules),
}

impl Default for SandboxSetting {
    fn default() -> Self {
        SandboxSetting::On(SandboxRules::default())
    }
}

/// The home a plugin API keeps its plugins' state in, which a confined
/// plugin of that dialect may write (issue 50: the Hermes home for Hermes
/// plugins); `None` for the others.
pub fn dialect_home(dialect: &str) -> Option<PathBuf> {
    (dialect == "hermes").then(super::hermes_yaml::hermes_home)
}

/// The sandbox setting of plugin `key` in the home's `config.json`.
pub fn read_sandbox(home: &Path, key: &str) -> Result<SandboxSetting, ConfigError> {
    let path = config_path(home);
    let doc = read_document(&path)?;
    sandbox_of(&doc, &path, key, home)
}

fn sandbox_of(
    doc: &Map<String, Value>,
    path: &Path,
    key: &str,
    home: &Path,
) -> Result<SandboxSetting, ConfigError> {
    let Some(value) = doc
        .get("plugins")
        .and_then(|p| p.get("entries"))
        .and_then(|e| e.get(key))
        .and_then(|e| e.get("sandbox"))
    else {
        return Ok(SandboxSetting::default());
    };
    let at = format!("plugins.entries.{key}.sandbox");
    let wrong = |key: String, expected: &'static str, found: &Value| ConfigError::WrongType {
        path: path.to_path_buf(),
        key,
        expected,
        found: json_type(found),
    };
    let fields = match value {
        Value::Null | Value::Bool(true) => return Ok(SandboxSetting::default()),
        Value::Bool(false) => return Ok(SandboxSetting::Off),
        Value::Object(fields) => fields,
        other => {
            return Err(wrong(
                at,
                "false, true, or an object such as {\"network\": \"none\", \"memory_mb\": 256}",
                other,
            ))
        }
    };
    let mut rules = SandboxRules::default();
    for (name, value) in fields {
        let here = format!("{at}.{name}");
        match name.as_str() {
            "network" => {
                rules.network = match value {
                    Value::Null => NetworkRule::Any,
                    Value::String(s) if s == "any" => NetworkRule::Any,
                    Value::String(s) if s == "none" => NetworkRule::None,
                    Value::Array(items) => NetworkRule::Hosts(
                        items
                            .iter()
                            .enumerate()
                            .map(|(i, v)| match v {
                                Value::String(s) if valid_host(s) => Ok(s.trim().to_string()),
                                other => Err(wrong(
                                    format!("{here}[{i}]"),
                                    "a host such as \"api.example.com\", \"*.example.org\" or \"127.0.0.1:8080\"",
                                    other,
                                )),
                            })
                            .collect::<Result<_, _>>()?,
                    ),
                    other => {
                        return Err(wrong(
                            here,
                            "\"any\", \"none\", or a list of hosts such as [\"api.example.com\"]",
                            other,
                        ))
                    }
                }
            }
            "memory_mb" => {
                rules.memory_mb = match value {
                    Value::Null => None,
                    Value::Number(n) if n.as_u64().is_some_and(|n| n > 0) => n.as_u64(),
                    other => return Err(wrong(here, "a whole number above 0", other)),
                }
            }
            "unix_sockets" => {
                rules.unix_sockets = match value {
                    Value::Null => false,
                    Value::Bool(b) => *b,
                    other => return Err(wrong(here, "true or false", other)),
                }
            }
            "read" | "write" => {
                let Value::Array(items) = value else {
                    return Err(wrong(here, "a list of paths", value));
                };
                let paths = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) if !s.trim().is_empty() => Ok(expand(s.trim(), home)),
                        other => Err(wrong(format!("{here}[{i}]"), "a path", other)),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if name == "read" {
                    rules.read = paths;
                } else {
                    rules.write = paths;
                }
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    path: path.to_path_buf(),
                    key: here,
                    known: "network, memory_mb, read, write or unix_sockets",
                })
            }
        }
    }
    Ok(SandboxSetting::On(rules))
}

/// A host pattern: a name, `*.` and a name, or either with `:port`
/// (an IPv6 address in brackets).
fn valid_host(text: &str) -> bool {
    let text = text.trim();
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (!h.contains(':') || h.starts_with('[')) => {
            (h, Some(p))
        }
        _ => (text, None),
    };
    let host = host.strip_prefix("*.").unwrap_or(host);
    port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
        && !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'))
}

/// `~` and `~/…` are the user's home; a relative path is from plughost's home.
fn expand(text: &str, home: &Path) -> PathBuf {
    let user_home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"))
    };
    if text == "~" {
        return user_home();
    }
    if let Some(rest) = text.strip_prefix("~/") {
        return user_home().join(rest);
    }
    let p = PathBuf::from(text);
    if p.is_absolute() {
        p
    } else {
        home.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::config::parse_document;

    fn of(text: &str) -> Result<SandboxSetting, ConfigError> {
        let path = Path::new("/h/config.json");
        sandbox_of(
            &parse_document(text, path).unwrap(),
            path,
            "w",
            Path::new("/h"),
        )
    }

    #[test]
    fn the_default_false_and_rules_are_read_and_mistakes_named() {
        assert_eq!(of("{}").unwrap(), SandboxSetting::default());
        let off = r#"{"plugins": {"entries": {"w": {"sandbox": false}}}}"#;
        assert_eq!(of(off).unwrap(), SandboxSetting::Off);
        let on = r#"{"plugins": {"entries": {"w": {"sandbox": {"network": ["api.example.com", "*.example.org", "127.0.0.1:8080"], "memory_mb": 256, "read": ["data"], "write": ["/srv/x"]}}}}}"#;
        let SandboxSetting::On(rules) = of(on).unwrap() else {
            panic!()
        };
        assert_eq!(
            rules.network,
            NetworkRule::Hosts(vec![
                "api.example.com".into(),
                "*.example.org".into(),
                "127.0.0.1:8080".into()
            ])
        );
        assert_eq!(rules.memory_mb, Some(256));
        assert_eq!(rules.read, [PathBuf::from("/h/data")]);
        assert_eq!(rules.write, [PathBuf::from("/srv/x")]);
        for (bad, named) in [
            (
                r#"{"plugins": {"entries": {"w": {"sandbox": 1}}}}"#,
                "plugins.entries.w.sandbox",
            ),
            (
                r#"{"plugins": {"entries": {"w": {"sandbox": {"network": "some"}}}}}"#,
                "plugins.entries.w.sandbox.network",
            ),
            (
                r#"{"plugins": {"entries": {"w": {"sandbox": {"network": ["a b"]}}}}}"#,
                "plugins.entries.w.sandbox.network[0]",
            ),
            (
                r#"{"plugins": {"entries": {"w": {"sandbox": {"memory_mb": 0}}}}}"#,
                "plugins.entries.w.sandbox.memory_mb",
            ),
            (
                r#"{"plugins": {"entries": {"w": {"sandbox": {"reads": []}}}}}"#,
                "plugins.entries.w.sandbox.reads",
            ),
        ] {
            let err = of(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{named}`")), "{bad}: {err}");
        }
    }
}
