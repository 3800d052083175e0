//! `mcp_servers` of `config.json`: the MCP servers whose tools the host
//! offers beside its plugins' (Hermes's `mcp_servers` of `config.yaml`,
//! the same shape), and `plugins.entries.<key>.mcp_allowlist`, the servers
//! a Hermes plugin may call through `ctx.call_mcp`.
//!
//! ```json
//! {"mcp_servers": {
//!    "files": {"command": "python3", "args": ["server.py"], "env": {"ROOT": "/srv"}},
//!    "search": {"url": "http://127.0.0.1:8123/mcp", "headers": {"X-Key": "k"}, "timeout": 30}
//! }}
//! ```
//!
//! Plain data: the client that connects them is `crate::mcp_client`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{config_path, json_type, read_document, ConfigError};

/// How long one tool call may take unless `timeout` says otherwise
/// (Hermes's default per-call timeout).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long starting and initialising a server may take unless
/// `connect_timeout` says otherwise (Hermes's default).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// How plughost reaches one MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to (and overriding) the environment plughost runs in.
        env: BTreeMap<String, String>,
        /// Its working directory (default: plughost's).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One MCP server: its name (which its tools' names carry), how to reach
/// it, and its limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    /// The limit of one tool call.
    pub timeout: Duration,
    /// The limit of starting it and the MCP handshake.
    pub connect_timeout: Duration,
    /// Who declared it: `config` for `config.json`, else the plugin key of
    /// the bundle whose `mcp.json` did (its tools are that plugin's).
    pub owner: String,
    /// A stdio server started confined as this plugin is (an isolated
    /// bundle's; `None`: unconfined, as plughost runs).
    pub sandboxed: Option<super::SandboxedAs>,
}

/// The owner of the servers `config.json` declares.
pub const CONFIG_OWNER: &str = "config";

/// Servers declared by plugins while they loaded (a bundle's `mcp.json`),
/// kept in the host's extension map until the host connects them.
#[derive(Default)]
pub struct DeclaredMcpServers(Mutex<Vec<McpServerSpec>>);

impl DeclaredMcpServers {
    /// Add `spec` (declared by a plugin that loaded).
    pub fn push(&self, spec: McpServerSpec) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(spec);
    }

    /// Everything declared so far, oldest first, leaving none.
    pub fn take(&self) -> Vec<McpServerSpec> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The enabled servers of `mcp_servers` in `config.json` (none when absent),
/// in the file's order. An entry with `"enabled": false` is left out.
pub fn read_mcp_servers(home: &Path) -> Result<Vec<McpServerSpec>, ConfigError> {
    let path = config_path(home);
    servers_of(&read_document(&path)?, &path)
}

fn servers_of(doc: &Map<String, Value>, path: &Path) -> Result<Vec<McpServerSpec>, ConfigError> {
    let servers = match doc.get("mcp_servers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(s)) => s,
        Some(other) => {
            return Err(wrong(
                path,
                "mcp_servers".into(),
                "an object mapping server names to {\"command\": …} or {\"url\": …}",
                other,
            ))
        }
    };
    let mut out = Vec::new();
    for (name, entry) in servers {
        let key = format!("mcp_servers.{name}");
        let Value::Object(entry) = entry else {
            return Err(wrong(
                path,
                key,
                "an object such as {\"command\": \"python3\", \"args\": [\"server.py\"]}",
                entry,
            ));
        };
        if entry.get("enabled") == Some(&Value::Bool(false)) {
            continue;
        }
        out.push(parse_server(name, entry, CONFIG_OWNER, |k| {
            MapError::at(path, format!("{key}.{k}"))
        })?);
    }
    Ok(out)
}

/// Where a field error points (its file and dotted key), made on demand.
pub struct MapError {
    path: PathBuf,
    key: String,
}

impl MapError {
    /// The field `key` of the file `path`.
    pub fn at(path: &Path, key: String) -> MapError {
        MapError {
            path: path.to_path_buf(),
            key,
        }
    }

    fn wrong(self, expected: &'static str, found: &Value) -> ConfigError {
        ConfigError::WrongType {
            path: self.path,
            key: self.key,
            expected,
            found: json_type(found),
        }
    }
}

/// One server entry (`{command, args, env, cwd}` or `{url, headers}`, with
/// `timeout` and `connect_timeout` in seconds); `at(field)` locates errors.
pub fn parse_server(
    name: &str,
    entry: &Map<String, Value>,
    owner: &str,
    at: impl Fn(&str) -> MapError,
) -> Result<McpServerSpec, ConfigError> {
    let text = |field: &str| -> Result<Option<String>, ConfigError> {
        match entry.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(at(field).wrong("a string", other)),
        }
    };
    let strings = |field: &str| -> Result<Vec<String>, ConfigError> {
        match entry.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(at(field).wrong("a list of strings", other)),
                })
                .collect(),
            Some(other) => Err(at(field).wrong("a list of strings", other)),
        }
    };
    let table = |field: &str| -> Result<BTreeMap<String, String>, ConfigError> {
        match entry.get(field) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Number(n) => Ok((k.clone(), n.to_string())),
                    Value::Bool(b) => Ok((k.clone(), b.to_string())),
                    other => Err(at(field).wrong("an object of string values", other)),
                })
                .collect(),
            Some(other) => Err(at(field).wrong("an object of string values", other)),
        }
    };
    let seconds = |field: &str, default: Duration| -> Result<Duration, ConfigError> {
        match entry.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
                _ => {
                    Err(at(field).wrong("a positive number of seconds", &Value::Number(n.clone())))
                }
            },
            Some(other) => Err(at(field).wrong("a positive number of seconds", other)),
        }
    };
    let transport =
        match (text("command")?, text("url")?) {
            (Some(command), None) if !command.trim().is_empty() => McpTransport::Stdio {
                command,
                args: strings("args")?,
                env: table("env")?,
                cwd: text("cwd")?.map(PathBuf::from),
            },
            (None, Some(url)) if !url.trim().is_empty() => McpTransport::Http {
                url,
                headers: table("headers")?,
            },
            _ => return Err(at("command").wrong(
                "exactly one of \"command\" (a stdio server) or \"url\" (a streamable-HTTP server)",
                &Value::Object(entry.clone()),
            )),
        };
    Ok(McpServerSpec {
        name: name.to_string(),
        transport,
        timeout: seconds("timeout", DEFAULT_CALL_TIMEOUT)?,
        connect_timeout: seconds("connect_timeout", DEFAULT_CONNECT_TIMEOUT)?,
        owner: owner.to_string(),
        sandboxed: None,
    })
}

fn wrong(path: &Path, key: String, expected: &'static str, found: &Value) -> ConfigError {
    MapError::at(path, key).wrong(expected, found)
}

/// `plugins.entries.<plugin>.mcp_allowlist` of `config.json`: the MCP
/// servers plugin `plugin` may call through `ctx.call_mcp`. As in Hermes,
/// missing, unreadable or not a list is the empty list (default deny).
pub fn read_mcp_allowlist(home: &Path, plugin: &str) -> Vec<String> {
    let Ok(doc) = read_document(&config_path(home)) else {
        return Vec::new();
    };
    let list = doc
        .get("plugins")
        .and_then(|p| p.get("entries"))
        .and_then(|e| e.get(plugin))
        .and_then(|e| e.get("mcp_allowlist"));
    match list {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(doc: Value) -> Result<Vec<McpServerSpec>, ConfigError> {
        servers_of(doc.as_object().unwrap(), Path::new("/h/config.json"))
    }

    #[test]
    fn stdio_and_http_entries_with_their_limits() {
        let mut servers = parse(json!({"mcp_servers": {
            "b": {"url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "k"}, "timeout": 2.5},
            "a": {"command": "python3", "args": ["s.py"], "env": {"N": 1}},
            "off": {"command": "x", "enabled": false}
        }}))
        .unwrap();
        assert_eq!(servers.len(), 2);
        servers.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(servers[0].name, "a");
        assert_eq!(
            servers[0].transport,
            McpTransport::Stdio {
                command: "python3".into(),
                args: vec!["s.py".into()],
                env: [("N".to_string(), "1".to_string())].into(),
                cwd: None
            }
        );
        assert_eq!(servers[0].timeout, DEFAULT_CALL_TIMEOUT);
        assert_eq!(servers[1].timeout, Duration::from_millis(2500));
        assert!(matches!(servers[1].transport, McpTransport::Http { .. }));
    }

    #[test]
    fn a_wrong_entry_is_refused_with_its_key() {
        let err = parse(json!({"mcp_servers": {"a": {"args": ["x"]}}})).unwrap_err();
        assert!(err.to_string().contains("mcp_servers.a.command"), "{err}");
        let err = parse(json!({"mcp_servers": {"a": {"command": "x", "args": "y"}}})).unwrap_err();
        assert!(err.to_string().contains("mcp_servers.a.args"), "{err}");
        assert!(parse(json!({"mcp_servers": []})).is_err());
        assert!(parse(json!({})).unwrap().is_empty());
    }
}
