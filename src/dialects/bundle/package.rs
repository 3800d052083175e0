//! Reading one Agent Plugins v1 package, as Hermes's
//! `hermes_cli/agent_plugins.py` does: the root `plugin.json` (its
//! `$schema`, a v1 `name`), `skills/<name>/SKILL.md` (frontmatter `name`
//! equal to the directory, a `description`), and `mcp.json` (`$schema`,
//! `mcpServers` of type `stdio` or `streamable-http`; `sse` is refused).
//! `${PLUGIN_ROOT}` and `${PLUGIN_DATA}` are replaced in a stdio server's
//! `args` and `env` values (and given to it as `PLUGIN_ROOT` and
//! `PLUGIN_DATA`); its `cwd` defaults to the plugin root. A bad skill or
//! server is left out with a diagnostic; a bad `plugin.json` refuses the
//! whole package.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::plugins::config::{
    McpServerSpec, McpTransport, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
};

pub const PLUGIN_SCHEMA_V1: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
pub const MCP_SCHEMA_V1: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";

/// A validated package.
#[derive(Debug)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub description: String,
    pub author: String,
    pub skills: Vec<PackageSkill>,
    pub servers: Vec<McpServerSpec>,
    /// What was left out, and why (`skill:x: …`, `mcp:y: …`).
    pub diagnostics: Vec<String>,
    /// What only the Claude Code layout has (hooks, commands, agents).
    pub claude: super::claude::Parts,
}

#[derive(Debug)]
pub struct PackageSkill {
    pub name: String,
    pub description: String,
    pub skill_md: PathBuf,
}

/// Whether `dir` holds an Agent Plugins v1 `plugin.json`.
pub fn is_v1(dir: &Path) -> bool {
    let path = dir.join("plugin.json");
    crate::plugins::snapshot::is_file(&path)
        && read_object(&path)
            .is_ok_and(|m| m.get("$schema").and_then(Value::as_str) == Some(PLUGIN_SCHEMA_V1))
}

fn read_object(path: &Path) -> Result<Map<String, Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    match serde_json::from_str::<Value>(text.trim_start_matches('\u{feff}')) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("must contain a JSON object".into()),
        Err(e) => Err(format!("is not valid JSON: {e}")),
    }
}

/// A v1 plugin name: 1–64 of `[a-z0-9.-]`, alphanumeric at both ends,
/// no `--` or `..`.
pub(super) fn valid_name(name: &str, dots: bool) -> bool {
    let ok_char =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=64).contains(&name.len())
        && name.chars().all(ok_char)
        && edge(name.chars().next())
        && edge(name.chars().last())
        && !name.contains("--")
        && !name.contains("..")
}

/// The package at `root`, whose data directory is `data` (made, when
/// `create_data`, for a stdio server: it may run there).
pub fn load(root: &Path, data: &Path, create_data: bool) -> Result<Package, String> {
    let manifest =
        read_object(&root.join("plugin.json")).map_err(|e| format!("plugin.json {e}"))?;
    if manifest.get("$schema").and_then(Value::as_str) != Some(PLUGIN_SCHEMA_V1) {
        return Err("plugin.json declares an unsupported or missing Agent Plugins schema".into());
    }
    let name = manifest
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !valid_name(name, true) {
        return Err(format!(
            "plugin.json name '{name}' does not satisfy v1 constraints"
        ));
    }
    let text = |field: &str| -> Result<String, String> {
        match manifest.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("plugin.json {field} must be a string")),
        }
    };
    let author = match manifest.get("author") {
        None | Some(Value::Null) => String::new(),
        Some(Value::Object(a)) => a
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        Some(_) => return Err("plugin.json author must be an object".into()),
    };
    let mut diagnostics = Vec::new();
    let skills = skills(root, false, &mut diagnostics);
    let servers = servers(root, data, name, create_data, &mut diagnostics);
    Ok(Package {
        name: name.to_string(),
        version: text("version")?,
        description: text("description")?,
        author,
        skills,
        servers,
        diagnostics,
        claude: Default::default(),
    })
}

/// The skills under `root/skills`: named by their frontmatter, which must
/// equal the folder (Agent Skills, v1), or, `by_folder`, by the folder
/// whatever the frontmatter says (Claude Code), the description then the
/// frontmatter's or the body's first line.
pub(super) fn skills(
    root: &Path,
    by_folder: bool,
    diagnostics: &mut Vec<String>,
) -> Vec<PackageSkill> {
    let Ok(entries) = std::fs::read_dir(root.join("skills")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let skill_md = dir.join("SKILL.md");
        if !dir.is_dir() || !skill_md.is_file() {
            continue;
        }
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let checked = if by_folder {
            folder_skill(&skill_md)
        } else {
            frontmatter(&skill_md).and_then(|fm| check_skill(&fm, &dir_name))
        };
        match checked {
            Ok(description) => out.push(PackageSkill {
                name: dir_name,
                description,
                skill_md,
            }),
            Err(problem) => diagnostics.push(format!("skill:{dir_name}: {problem}")),
        }
    }
    out
}

/// The YAML frontmatter of a SKILL.md.
fn frontmatter(path: &Path) -> Result<Map<String, Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("invalid SKILL.md: {e}"))?;
    let text = text.trim_start_matches('\u{feff}');
    let body = text
        .strip_prefix("---")
        .ok_or("invalid SKILL.md: missing YAML frontmatter")?;
    let end = body
        .find("\n---")
        .ok_or("invalid SKILL.md: unterminated YAML frontmatter")?;
    match serde_saphyr::from_str::<Value>(&body[..end]) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("invalid SKILL.md: YAML frontmatter must be an object".into()),
        Err(e) => Err(format!("invalid SKILL.md: invalid YAML frontmatter: {e}")),
    }
}

/// A Claude Code skill's description: its frontmatter's, else its body's
/// first line of text.
fn folder_skill(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("invalid SKILL.md: {e}"))?;
    let (fm, body) =
        super::commands::split_frontmatter(&text).map_err(|e| format!("invalid SKILL.md: {e}"))?;
    let description = match fm.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => d.trim().to_string(),
        _ => body
            .lines()
            .map(|l| l.trim().trim_start_matches('#').trim())
            .find(|l| !l.is_empty())
            .unwrap_or_default()
            .to_string(),
    };
    Ok(description)
}

/// The skill's description, when its frontmatter satisfies Agent Skills.
fn check_skill(fm: &Map<String, Value>, dir_name: &str) -> Result<String, String> {
    let name = fm.get("name").and_then(Value::as_str).unwrap_or_default();
    if name != dir_name || !valid_name(name, false) {
        return Err("name must match the directory and satisfy Agent Skills constraints".into());
    }
    match fm.get("description").and_then(Value::as_str) {
        Some(d) if (1..=1024).contains(&d.chars().count()) => Ok(d.to_string()),
        _ => Err("description must be a non-empty string of at most 1024 characters".into()),
    }
}

fn servers(
    root: &Path,
    data: &Path,
    plugin: &str,
    create_data: bool,
    diagnostics: &mut Vec<String>,
) -> Vec<McpServerSpec> {
    let path = root.join("mcp.json");
    if !path.exists() {
        return Vec::new();
    }
    let config = match read_object(&path) {
        Ok(c) => c,
        Err(e) => {
            diagnostics.push(format!("mcp: mcp.json {e}"));
            return Vec::new();
        }
    };
    if config.get("$schema").and_then(Value::as_str) != Some(MCP_SCHEMA_V1) {
        diagnostics.push("mcp: mcp.json declares an unsupported schema".into());
        return Vec::new();
    }
    let Some(Value::Object(servers)) = config.get("mcpServers") else {
        diagnostics.push("mcp: mcpServers must be an object".into());
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, entry) in servers {
        let translated = match entry {
            Value::Object(e) => translate(e, root, data, create_data),
            _ => Err("invalid server entry".into()),
        };
        match translated {
            Ok(transport) => out.push(McpServerSpec {
                name: name.clone(),
                transport,
                timeout: DEFAULT_CALL_TIMEOUT,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                owner: plugin.to_string(),
                sandboxed: None,
            }),
            Err(problem) => diagnostics.push(format!("mcp:{name}: {problem}")),
        }
    }
    out
}

/// `${PLUGIN_ROOT}` and `${PLUGIN_DATA}` in `value` replaced.
pub fn expand(value: &str, root: &Path, data: &Path) -> String {
    value
        .replace("${PLUGIN_ROOT}", &root.to_string_lossy())
        .replace("${PLUGIN_DATA}", &data.to_string_lossy())
}

pub(super) fn strings(entry: &Map<String, Value>, field: &str) -> Result<Vec<String>, String> {
    match entry.get(field) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or(format!("{field} must be an array of strings"))
            })
            .collect(),
        Some(_) => Err(format!("{field} must be an array of strings")),
    }
}

pub(super) fn string_map(
    entry: &Map<String, Value>,
    field: &str,
) -> Result<BTreeMap<String, String>, String> {
    match entry.get(field) {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or(format!("{field} must map string keys to string values"))
            })
            .collect(),
        Some(_) => Err(format!("{field} must map string keys to string values")),
    }
}

fn translate(
    entry: &Map<String, Value>,
    root: &Path,
    data: &Path,
    create_data: bool,
) -> Result<McpTransport, String> {
    let allowed: &[&str] = match entry.get("type").and_then(Value::as_str) {
        Some("stdio") => &["type", "command", "args", "env", "cwd"],
        Some("streamable-http") => &["type", "url", "headers"],
        Some("sse") => return Err("portable sse transport is not supported".into()),
        _ => return Err("unknown MCP server type".into()),
    };
    if let Some(unknown) = entry.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("unknown field '{unknown}'"));
    }
    if entry.get("type").and_then(Value::as_str) == Some("streamable-http") {
        let url = entry.get("url").and_then(Value::as_str).unwrap_or_default();
        check_url(url)?;
        return Ok(McpTransport::Http {
            url: url.to_string(),
            headers: string_map(entry, "headers")?,
        });
    }
    let command = entry
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let command = if let Some(inside) = command.strip_prefix("./") {
        scoped(root, inside)?.to_string_lossy().into_owned()
    } else if command.is_empty() || command.contains(char::is_whitespace) || command.contains('/') {
        return Err("command must be a bare executable or begin with ./".into());
    } else {
        command.to_string()
    };
    let mut env = string_map(entry, "env")?;
    if env.contains_key("PLUGIN_ROOT") || env.contains_key("PLUGIN_DATA") {
        return Err("PLUGIN_ROOT and PLUGIN_DATA are reserved".into());
    }
    for value in env.values_mut() {
        *value = expand(value, root, data);
    }
    env.insert("PLUGIN_ROOT".into(), root.to_string_lossy().into_owned());
    env.insert("PLUGIN_DATA".into(), data.to_string_lossy().into_owned());
    let cwd = match entry.get("cwd").and_then(Value::as_str) {
        None => root.to_path_buf(),
        Some(c) if c.starts_with("./") => scoped(root, &c[2..])?,
        Some(c) if c == "${PLUGIN_ROOT}" || c.starts_with("${PLUGIN_ROOT}/") => {
            PathBuf::from(expand(c, root, data))
        }
        Some(c) if c == "${PLUGIN_DATA}" || c.starts_with("${PLUGIN_DATA}/") => {
            PathBuf::from(expand(c, root, data))
        }
        Some(_) => return Err("cwd must start with ./, ${PLUGIN_ROOT}, or ${PLUGIN_DATA}".into()),
    };
    if create_data {
        std::fs::create_dir_all(data)
            .map_err(|e| format!("cannot make {}: {e}", data.display()))?;
    }
    if create_data && cwd.starts_with(data) {
        std::fs::create_dir_all(&cwd).map_err(|e| format!("cannot make {}: {e}", cwd.display()))?;
    }
    Ok(McpTransport::Stdio {
        command,
        args: strings(entry, "args")?
            .iter()
            .map(|a| expand(a, root, data))
            .collect(),
        env,
        cwd: Some(cwd),
    })
}

/// `relative` inside `root`, refusing `..` that would leave it.
pub(super) fn scoped(root: &Path, relative: &str) -> Result<PathBuf, String> {
    if Path::new(relative)
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err("path escapes its resolved root".into());
    }
    Ok(root.join(relative))
}

/// Agent Plugins v1 §7.2.1: absolute http(s), no user info or fragment,
/// plain http only for loopback.
pub(super) fn check_url(url: &str) -> Result<(), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("url must be an absolute http(s) URL")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err("url scheme must be http or https".into());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("url must not contain user information".into());
    }
    if url.contains('#') {
        return Err("url must not contain a fragment".into());
    }
    let host = authority
        .strip_prefix('[')
        .and_then(|h| h.split_once(']').map(|(h, _)| h))
        .unwrap_or_else(|| authority.rsplit_once(':').map_or(authority, |(h, _)| h));
    if host.is_empty() {
        return Err("url must have a host".into());
    }
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if scheme == "http" && !loopback {
        return Err("non-loopback url must use https".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_urls_and_placeholders() {
        assert!(valid_name("my-plugin.v2", true));
        assert!(!valid_name("My", true) && !valid_name("a--b", true) && !valid_name("-a", true));
        assert!(check_url("http://127.0.0.1:8000/mcp").is_ok());
        assert!(check_url("http://localhost/mcp").is_ok());
        assert!(check_url("http://example.com/mcp").is_err());
        assert!(check_url("https://u@example.com/mcp").is_err());
        assert_eq!(
            expand(
                "${PLUGIN_ROOT}/s.py:${PLUGIN_DATA}",
                Path::new("/r"),
                Path::new("/d")
            ),
            "/r/s.py:/d"
        );
        assert!(scoped(Path::new("/r"), "../x").is_err());
    }
}
