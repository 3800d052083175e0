//! The Claude Code plugin layout, read as Claude Code reads it:
//! `.claude-plugin/plugin.json` (`name`, `version`, `description`,
//! `author.name`), `skills/<folder>/SKILL.md` (named by the folder, as
//! Claude Code names them, whatever the frontmatter's `name`),
//! `hooks/hooks.json` or the manifest's `hooks` ([`super::hooks`]),
//! `commands/**/*.md` ([`super::commands`]), `agents/*.md`
//! ([`super::agents`]), and MCP servers from the manifest's `mcpServers`
//! (an object, or a path to a JSON file in the plugin) else the root
//! `.mcp.json` (`{"mcpServers": {…}}`, or the servers map itself).
//!
//! A server is stdio (no `type`, or `stdio`) or streamable HTTP (`http`,
//! `streamable-http`); `sse` and `ws` are left out. A stdio server's
//! `command` is what Claude Code starts: a name looked up on `PATH`
//! (`python3`, `npx`, `uvx`), an absolute path anywhere
//! (`/usr/bin/python3`), or a path in the plugin (`./bin/server`,
//! `${CLAUDE_PLUGIN_ROOT}/server`). `${CLAUDE_PLUGIN_ROOT}` and
//! `${CLAUDE_PLUGIN_DATA}` (and v1's `${PLUGIN_ROOT}`/`${PLUGIN_DATA}`)
//! are replaced in `command`, `args`, `env` values, `cwd`, `url` and
//! header values, and so are Claude Code's general `${VAR}` and
//! `${VAR:-default}` from the environment ([`super::vars`]); the stdio
//! server also gets them as environment variables. Output styles and LSP
//! servers are reported, not run.
//!
//! Hermes itself reads only a root v1 `plugin.json`; a nested foreign
//! manifest it skips (`plugins_discovery.py`, `_declares_v1_schema`). A
//! directory with both is read as v1.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::package::{self, Package};
use crate::plugins::config::{
    McpServerSpec, McpTransport, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
};

/// Where the layout keeps its manifest, relative to the plugin root.
pub const MANIFEST: &str = crate::plugins::manifest::CLAUDE_CODE_MANIFEST;

/// Parts of the layout plughost does not run: reported when present.
const NOT_RUN: [&str; 2] = ["outputStyles", "lspServers"];

/// What only the Claude Code layout has.
#[derive(Debug, Default)]
pub struct Parts {
    /// The values of its `userConfig` options.
    pub options: Options,
    pub hooks: Vec<super::hooks::HookDecl>,
    pub commands: Vec<super::commands::PromptCommand>,
    pub agents: Vec<super::agents::Agent>,
}

/// Whether `dir` is a Claude-Code-layout plugin (and not a v1 package).
pub fn is_claude(dir: &Path) -> bool {
    crate::plugins::snapshot::is_file(&dir.join(MANIFEST)) && !package::is_v1(dir)
}

fn read_object(path: &Path, label: &str) -> Result<Map<String, Value>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("{label}: cannot read it: {e}"))?;
    match serde_json::from_str::<Value>(text.trim_start_matches('\u{feff}')) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("{label} must contain a JSON object")),
        Err(e) => Err(format!("{label} is not valid JSON: {e}")),
    }
}

/// The values of a plugin's `userConfig` options, by key.
pub type Options = std::collections::BTreeMap<String, String>;

/// The environment variable Claude Code gives an option's value in.
pub fn option_var(key: &str) -> String {
    format!("CLAUDE_PLUGIN_OPTION_{}", key.to_ascii_uppercase())
}

/// The values of the manifest's `userConfig` options: from the home's
/// `config.json` (`plugins.user_config.<plugin>.<key>`), else the
/// environment (`CLAUDE_PLUGIN_OPTION_<KEY>`), else the option's
/// `default`. An option with none of them is a diagnostic naming where to
/// set it; what uses it (`${user_config.KEY}`) then fails to start.
fn options(
    manifest: &Map<String, Value>,
    plugin: &str,
    home: Option<&Path>,
    diagnostics: &mut Vec<String>,
) -> Options {
    let Some(Value::Object(declared)) = manifest.get("userConfig") else {
        return Options::new();
    };
    let configured = home
        .and_then(|h| std::fs::read_to_string(h.join("config.json")).ok())
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|c| c["plugins"]["user_config"][plugin].as_object().cloned())
        .unwrap_or_default();
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    let mut out = Options::new();
    for (key, spec) in declared {
        let value = configured
            .get(key)
            .and_then(text)
            .or_else(|| std::env::var(option_var(key)).ok())
            .or_else(|| spec.get("default").and_then(text));
        match value {
            Some(v) => {
                out.insert(key.clone(), v);
            }
            None if home.is_some() => diagnostics.push(format!(
                "userConfig: '{key}' is not set: set plugins.user_config.{plugin}.{key} in config.json, or {}",
                option_var(key)
            )),
            None => {}
        }
    }
    out
}

/// The `userConfig` options the manifest of the plugin at `root`
/// declares, for `plugins install` to ask for (none when it cannot be
/// read: loading reports that).
pub fn declared_options(root: &Path) -> Vec<crate::plugins::install::user_config::UserOption> {
    let Ok(manifest) = read_object(&root.join(MANIFEST), MANIFEST) else {
        return Vec::new();
    };
    let Some(Value::Object(declared)) = manifest.get("userConfig") else {
        return Vec::new();
    };
    let text = |spec: &Value, field: &str| {
        spec.get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_string)
    };
    declared
        .iter()
        .map(
            |(key, spec)| crate::plugins::install::user_config::UserOption {
                key: key.clone(),
                prompt: text(spec, "title")
                    .or_else(|| text(spec, "description"))
                    .unwrap_or_else(|| key.clone()),
                sensitive: spec.get("sensitive").and_then(Value::as_bool) == Some(true),
                has_default: spec.get("default").is_some_and(|d| !d.is_null()),
                env_var: Some(option_var(key)),
            },
        )
        .collect()
}

/// The plugin at `root` in the Claude-Code layout, with data directory
/// `data` (made, when `create_data`, for a stdio server).
pub fn load(root: &Path, data: &Path, create_data: bool) -> Result<Package, String> {
    load_in(root, data, create_data, None)
}

/// [`load`] for the host at `home`, whose `config.json` holds the values
/// of the plugin's `userConfig` options.
pub fn load_in(
    root: &Path,
    data: &Path,
    create_data: bool,
    home: Option<&Path>,
) -> Result<Package, String> {
    let manifest = read_object(&root.join(MANIFEST), MANIFEST)?;
    let name = manifest
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !package::valid_name(name, true) {
        return Err(format!(
            "{MANIFEST} name '{name}' does not satisfy v1 constraints"
        ));
    }
    let text = |field: &str| -> Result<String, String> {
        match manifest.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{MANIFEST} {field} must be a string")),
        }
    };
    let author = match manifest.get("author") {
        Some(Value::Object(a)) => a
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let mut diagnostics = Vec::new();
    for part in NOT_RUN {
        let declared =
            manifest.contains_key(part) || (part != "lspServers" && root.join(part).exists());
        if declared {
            diagnostics.push(format!(
                "{part}: Claude Code {part} are not run by plughost"
            ));
        }
    }
    let skills = package::skills(root, true, &mut diagnostics);
    let options = options(&manifest, name, home, &mut diagnostics);
    let servers = servers(
        &manifest,
        root,
        data,
        name,
        (create_data, &options),
        &mut diagnostics,
    );
    let parts = Parts {
        options: options.clone(),
        hooks: super::hooks::read(root, &manifest, &mut diagnostics),
        commands: super::commands::read(root, name, &mut diagnostics),
        agents: super::agents::read(root, name, &mut diagnostics),
    };
    if create_data && !parts.hooks.is_empty() {
        std::fs::create_dir_all(data)
            .map_err(|e| format!("cannot make {}: {e}", data.display()))?;
    }
    Ok(Package {
        name: name.to_string(),
        version: text("version")?,
        description: text("description")?,
        author,
        skills,
        servers,
        diagnostics,
        claude: parts,
    })
}

/// The servers map: the manifest's `mcpServers` (inline, or a file of the
/// plugin), else `.mcp.json`.
fn servers_map(
    manifest: &Map<String, Value>,
    root: &Path,
) -> Result<Option<Map<String, Value>>, String> {
    let file = match manifest.get("mcpServers") {
        Some(Value::Object(m)) => return Ok(Some(m.clone())),
        Some(Value::String(path)) => {
            let relative = path.strip_prefix("./").unwrap_or(path);
            package::scoped(root, relative)?
        }
        Some(_) => return Err("mcpServers must be an object or a path".into()),
        None => root.join(".mcp.json"),
    };
    if !file.exists() {
        return Ok(None);
    }
    let label = file
        .strip_prefix(root)
        .unwrap_or(&file)
        .display()
        .to_string();
    let config = read_object(&file, &label)?;
    Ok(Some(match config.get("mcpServers") {
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(format!("{label} mcpServers must be an object")),
        None => config,
    }))
}

fn servers(
    manifest: &Map<String, Value>,
    root: &Path,
    data: &Path,
    plugin: &str,
    (create_data, options): (bool, &Options),
    diagnostics: &mut Vec<String>,
) -> Vec<McpServerSpec> {
    let map = match servers_map(manifest, root) {
        Ok(Some(m)) => m,
        Ok(None) => return Vec::new(),
        Err(problem) => {
            diagnostics.push(format!("mcp: {problem}"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (name, entry) in map {
        let translated = match &entry {
            Value::Object(e) => translate(e, root, data, create_data, options),
            _ => Err("invalid server entry".into()),
        };
        match translated {
            Ok(transport) => out.push(McpServerSpec {
                name,
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

/// Both spellings of the plugin's root and data directory replaced, and
/// Claude Code's `${VAR}` / `${VAR:-default}` from the environment
/// ([`super::vars`]).
fn expand(value: &str, root: &Path, data: &Path, options: &Options) -> Result<String, String> {
    super::vars::expand_with(
        value,
        root,
        data,
        &|name| match name.strip_prefix("user_config.") {
            Some(key) => options.get(key).cloned(),
            None => std::env::var(name).ok(),
        },
    )
}

fn translate(
    entry: &Map<String, Value>,
    root: &Path,
    data: &Path,
    create_data: bool,
    options: &Options,
) -> Result<McpTransport, String> {
    match entry.get("type").and_then(Value::as_str) {
        None | Some("stdio") => {}
        Some("http" | "streamable-http") => {
            let url = expand(
                entry.get("url").and_then(Value::as_str).unwrap_or_default(),
                root,
                data,
                options,
            )?;
            package::check_url(&url)?;
            let mut headers = package::string_map(entry, "headers")?;
            for value in headers.values_mut() {
                *value = expand(value, root, data, options)?;
            }
            return Ok(McpTransport::Http { url, headers });
        }
        Some(other) => return Err(format!("the {other} transport is not supported")),
    }
    let command = expand(
        entry
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        root,
        data,
        options,
    )?;
    // What Claude Code starts: a name on PATH, an absolute path anywhere,
    // or a path relative to the plugin.
    let command = if command.is_empty() {
        return Err("command is missing".into());
    } else if Path::new(&command).is_absolute() || !command.contains('/') {
        PathBuf::from(command)
    } else {
        package::scoped(root, command.strip_prefix("./").unwrap_or(&command))?
    };
    let mut env = package::string_map(entry, "env")?;
    for value in env.values_mut() {
        *value = expand(value, root, data, options)?;
    }
    for (key, value) in options {
        env.entry(option_var(key)).or_insert_with(|| value.clone());
    }
    for (var, dir) in [
        ("CLAUDE_PLUGIN_ROOT", root),
        ("CLAUDE_PLUGIN_DATA", data),
        ("PLUGIN_ROOT", root),
        ("PLUGIN_DATA", data),
    ] {
        env.entry(var.into())
            .or_insert_with(|| dir.to_string_lossy().into_owned());
    }
    let cwd = match entry.get("cwd").and_then(Value::as_str) {
        None => root.to_path_buf(),
        Some(c) if c.starts_with("./") => package::scoped(root, &c[2..])?,
        Some(c) => inside_plugin(Path::new(&expand(c, root, data, options)?), root, data)?,
    };
    if create_data {
        std::fs::create_dir_all(data)
            .map_err(|e| format!("cannot make {}: {e}", data.display()))?;
    }
    Ok(McpTransport::Stdio {
        command: command.to_string_lossy().into_owned(),
        args: package::strings(entry, "args")?
            .iter()
            .map(|a| expand(a, root, data, options))
            .collect::<Result<_, _>>()?,
        env,
        cwd: Some(cwd),
    })
}

/// An absolute `path` accepted only under the plugin root or its data
/// directory, and without `..`.
fn inside_plugin(path: &Path, root: &Path, data: &Path) -> Result<PathBuf, String> {
    let climbs = path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    if climbs || !(path.starts_with(root) || path.starts_with(data)) {
        return Err(format!(
            "{} is outside the plugin root and its data directory",
            path.display()
        ));
    }
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_placeholder_spellings_are_replaced_and_paths_stay_inside() {
        let (root, data) = (Path::new("/r"), Path::new("/d"));
        assert_eq!(
            expand(
                "${CLAUDE_PLUGIN_ROOT}/s:${PLUGIN_DATA}",
                root,
                data,
                &Options::new()
            )
            .unwrap(),
            "/r/s:/d"
        );
        assert!(inside_plugin(Path::new("/r/bin/x"), root, data).is_ok());
        assert!(inside_plugin(Path::new("/r/../etc/x"), root, data).is_err());
        assert!(inside_plugin(Path::new("/usr/bin/x"), root, data).is_err());
    }
}
