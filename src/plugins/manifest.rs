//! Plugin manifests: `plugin.yaml`, then `plugin.yml`, then `plugin.json`.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::plugins::format::{Formats, PluginFormat};

/// Manifest file names, in probe order.
pub const MANIFEST_FILES: [&str; 3] = ["plugin.yaml", "plugin.yml", "plugin.json"];

/// The highest `manifest_version` this runtime understands.
pub const MAX_MANIFEST_VERSION: i64 = 1;

/// What a plugin is; `standalone` and `backend` load, the others are
/// skipped. `platform` (a gateway adapter) and `model-provider` are
/// Hermes's kinds; Flowly manifests have only the first three.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Standalone,
    Backend,
    Exclusive,
    Platform,
    #[serde(rename = "model-provider")]
    ModelProvider,
}

impl PluginKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Standalone => "standalone",
            PluginKind::Backend => "backend",
            PluginKind::Exclusive => "exclusive",
            PluginKind::Platform => "platform",
            PluginKind::ModelProvider => "model-provider",
        }
    }
}

/// A declared environment requirement (advisory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequiredEnv {
    pub name: String,
    pub description: String,
}

/// A parsed manifest with defaults applied.
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub manifest_version: i64,
    pub description: String,
    pub author: String,
    pub kind: PluginKind,
    pub requires_env: Vec<RequiredEnv>,
    pub provides_tools: Vec<String>,
    pub provides_hooks: Vec<String>,
    /// Web search/extract backends a `kind: backend` plugin registers
    /// (descriptive, as `provides_tools`).
    pub provides_web_providers: Vec<String>,
    /// The plugin API and its own fields (`dialect: codumentor`, `entry`,
    /// `dependencies`, `priority`, `args`); all unset for a Flowly manifest.
    pub dialect: DialectFields,
    /// The file it was read from.
    pub path: PathBuf,
    /// Problems that did not stop loading (e.g. an unknown kind).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// The manifest fields that select a plugin API other than Flowly's and
/// describe how that API loads the plugin (the API's
/// [`PluginFormat::entry_hint`] says whether it has them).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DialectFields {
    /// `dialect:` as written (`None`: Flowly, the directory default).
    pub name: Option<String>,
    /// `entry: "<module>:<Class>"`.
    pub entry: Option<String>,
    /// Keys of plugins that must load first.
    pub dependencies: Vec<String>,
    /// Load order among plugins whose dependencies are met (lower first).
    pub priority: Option<i64>,
    /// Constructor keyword arguments.
    pub args: serde_json::Map<String, Value>,
}

/// Why a manifest could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("no manifest (expected one of plugin.yaml, plugin.yml, plugin.json)")]
    Missing,
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed {file}: {message}")]
    Malformed { file: String, message: String },
    #[error("{file}: the manifest root must be a mapping, found {found}")]
    NotAMapping { file: String, found: &'static str },
    #[error("{file}: field '{field}' {problem}")]
    BadField {
        file: String,
        field: &'static str,
        problem: String,
    },
    #[error(
        "manifest_version {found} is newer than this plughost supports (max {MAX_MANIFEST_VERSION}); upgrade plughost"
    )]
    TooNew { found: i64 },
}

/// The manifest of the Claude-Code plugin layout, relative to its root:
/// probed after [`MANIFEST_FILES`], so such a directory is a plugin
/// directory (the bundle dialect reads it; issue 22).
pub const CLAUDE_CODE_MANIFEST: &str = ".claude-plugin/plugin.json";

/// Find the manifest file of a plugin directory (probe order).
pub fn find_manifest(dir: &Path) -> Option<PathBuf> {
    MANIFEST_FILES
        .iter()
        .chain(std::iter::once(&CLAUDE_CODE_MANIFEST))
        .map(|f| dir.join(f))
        .find(|p| crate::plugins::snapshot::is_file(p))
}

/// Read and validate the manifest of `dir`; `dir_name` is the default name.
/// Its `dialect:` is kept as written and the API's own fields are not read
/// (see [`load_with`]).
pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
    load_in(dir, None)
}

/// [`load`], checking `dialect:` against `formats` and reading the named
/// API's own fields.
pub fn load_with(dir: &Path, formats: Formats<'_>) -> Result<Manifest, ManifestError> {
    load_in(dir, Some(formats))
}

fn load_in(dir: &Path, formats: Option<Formats<'_>>) -> Result<Manifest, ManifestError> {
    let path = find_manifest(dir).ok_or(ManifestError::Missing)?;
    // A special file (a FIFO) is refused, never opened for a blocking read.
    let text = crate::plugins::snapshot::read_regular(&path)
        .and_then(|b| String::from_utf8(b.to_vec()).map_err(std::io::Error::other))
        .map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
    let default_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_in(&text, &path, &default_name, formats)
}

/// Parse manifest text; the format follows the file's extension. Its
/// `dialect:` is kept as written (see [`parse_with`]).
pub fn parse(text: &str, path: &Path, default_name: &str) -> Result<Manifest, ManifestError> {
    parse_in(text, path, default_name, None)
}

/// [`parse`], checking `dialect:` against `formats` and reading the named
/// API's own fields.
pub fn parse_with(
    text: &str,
    path: &Path,
    default_name: &str,
    formats: Formats<'_>,
) -> Result<Manifest, ManifestError> {
    parse_in(text, path, default_name, Some(formats))
}

fn parse_in(
    text: &str,
    path: &Path,
    default_name: &str,
    formats: Option<Formats<'_>>,
) -> Result<Manifest, ManifestError> {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let map = read_mapping(text, path, &file)?;
    let bad = |field: &'static str, problem: &str| ManifestError::BadField {
        file: file.clone(),
        field,
        problem: problem.to_string(),
    };

    let text_field = |field: &'static str| -> Result<Option<String>, ManifestError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(_) => Err(bad(field, "must be a string")),
        }
    };
    let list_field = |field: &'static str| -> Result<Vec<String>, ManifestError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(bad(field, "must be a list of strings")),
                })
                .collect(),
            Some(_) => Err(bad(field, "must be a list of strings")),
        }
    };

    // (a version above plughost's own is accepted
    // when the plugin's API reads it: a Hermes `manifest_version: 2`.)
    let dir = path.parent().unwrap_or(Path::new(""));
    let read_by_api =
        |v: i64| formats.is_some_and(|f| f.all().any(|f| f.reads_manifest_version(v, dir)));
    let manifest_version = manifest_version_of(&map, &bad, &read_by_api)?;

    let mut warnings = Vec::new();
    let kind = match text_field("kind")?.as_deref().map(str::trim) {
        None | Some("") | Some("standalone") => PluginKind::Standalone,
        Some("backend") => PluginKind::Backend,
        Some("exclusive") => PluginKind::Exclusive,
        // A messaging platform's plugin (issue 49: it loads as any other).
        Some("platform") => PluginKind::Platform,
        // A model provider's plugin (issue 52: its profile is a model).
        Some("model-provider") => PluginKind::ModelProvider,
        Some(other) => {
            warnings.push(format!("unknown kind '{other}', treated as standalone"));
            PluginKind::Standalone
        }
    };

    let requires_env = requires_env_of(&map, &bad)?;

    let dialect = dialect_fields(&map, formats, &bad, &list_field)?;
    let name = text_field("name")?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    Ok(Manifest {
        name: name.unwrap_or_else(|| default_name.to_string()),
        version: text_field("version")?.unwrap_or_default(),
        manifest_version,
        description: text_field("description")?.unwrap_or_default(),
        // (Agent Plugins v1 and Claude Code's
        // plugin.json write the author as an object: its name is read.)
        author: match map.get("author") {
            Some(Value::Object(a)) => match a.get("name") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => {
                    return Err(bad(
                        "author",
                        "must be a string or an object with a string name",
                    ))
                }
            },
            _ => text_field("author")?.unwrap_or_default(),
        },
        kind,
        requires_env,
        provides_tools: list_field("provides_tools")?,
        provides_hooks: list_field("provides_hooks")?,
        provides_web_providers: list_field("provides_web_providers")?,
        dialect,
        path: path.to_path_buf(),
        warnings,
    })
}

/// The manifest text as a value (an empty YAML document is null).
fn parse_value(text: &str, is_json: bool) -> Result<Value, String> {
    if is_json {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else if text.trim().is_empty() {
        Ok(Value::Null)
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }
}

/// The manifest's top-level mapping: JSON for a `.json` file, YAML
/// otherwise (an empty YAML document is a mapping of all defaults).
fn read_mapping(
    text: &str,
    path: &Path,
    file: &str,
) -> Result<serde_json::Map<String, Value>, ManifestError> {
    let is_json = path.extension().is_some_and(|e| e == "json");
    // Parsed once per build: discovery, the sniff and the load each read it.
    let parsed = crate::plugins::snapshot::derived(
        if is_json {
            "manifest json"
        } else {
            "manifest yaml"
        },
        text,
        || parse_value(text, is_json),
    );
    let root = parsed.map_err(|message| ManifestError::Malformed {
        file: file.to_string(),
        message,
    })?;
    let map = match root {
        Value::Object(m) => m,
        // An empty YAML document means "all defaults".
        Value::Null if !is_json => serde_json::Map::new(),
        other => {
            return Err(ManifestError::NotAMapping {
                file: file.to_string(),
                found: type_name(&other),
            })
        }
    };
    Ok(map)
}

/// `manifest_version`: 1 when absent; refused when newer than this
/// plughost reads or below 1.
fn manifest_version_of(
    map: &serde_json::Map<String, Value>,
    bad: &dyn Fn(&'static str, &str) -> ManifestError,
    read_by_api: &dyn Fn(i64) -> bool,
) -> Result<i64, ManifestError> {
    let manifest_version = match map.get("manifest_version") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| bad("manifest_version", "must be a whole number"))?,
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| bad("manifest_version", "must be a whole number"))?,
        Some(_) => return Err(bad("manifest_version", "must be a whole number")),
    };
    if manifest_version > MAX_MANIFEST_VERSION && !read_by_api(manifest_version) {
        return Err(ManifestError::TooNew {
            found: manifest_version,
        });
    }
    if manifest_version < 1 {
        return Err(bad("manifest_version", "must be 1 or more"));
    }
    Ok(manifest_version)
}

/// `requires_env`: a name, a list of names or `{name, description}`
/// mappings, or a mapping of name to description.
fn requires_env_of(
    map: &serde_json::Map<String, Value>,
    bad: &dyn Fn(&'static str, &str) -> ManifestError,
) -> Result<Vec<RequiredEnv>, ManifestError> {
    let requires_env = match map.get("requires_env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![RequiredEnv {
            name: s.clone(),
            description: String::new(),
        }],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(RequiredEnv {
                    name: s.clone(),
                    description: String::new(),
                }),
                Value::Object(o) => match o.get("name") {
                    Some(Value::String(n)) => Ok(RequiredEnv {
                        name: n.clone(),
                        description: o
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    }),
                    _ => Err(bad(
                        "requires_env",
                        "entries must be names or {name, description} mappings",
                    )),
                },
                _ => Err(bad(
                    "requires_env",
                    "entries must be names or {name, description} mappings",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| RequiredEnv {
                name: k.clone(),
                description: v.as_str().unwrap_or_default().to_string(),
            })
            .collect(),
        Some(_) => return Err(bad("requires_env", "must be a list of variable names")),
    };
    Ok(requires_env)
}

/// `dialect` and, when `formats` are known and the API it names has an
/// `entry` ([`PluginFormat::entry_hint`]), its `entry` (required,
/// `module:Class`), `dependencies`, `priority` and `args`. Without
/// `formats` the name is kept as written (trimmed) and nothing more read.
fn dialect_fields(
    map: &serde_json::Map<String, Value>,
    formats: Option<Formats<'_>>,
    bad: &dyn Fn(&'static str, &str) -> ManifestError,
    list_field: &dyn Fn(&'static str) -> Result<Vec<String>, ManifestError>,
) -> Result<DialectFields, ManifestError> {
    let (name, format) = match (map.get("dialect"), formats) {
        (None | Some(Value::Null), _) => (None, None),
        (Some(Value::String(s)), None) => (Some(s.trim().to_string()), None),
        (Some(Value::String(s)), Some(formats)) => match formats.by_manifest_name(s.trim()) {
            Some(f) => (Some(s.trim().to_string()), Some(f)),
            None => {
                let known: Vec<&str> = formats.named().map(|f| f.id().as_str()).collect();
                return Err(bad(
                    "dialect",
                    &format!(
                        "names an unknown plugin API '{s}' (one of: {})",
                        known.join(", ")
                    ),
                ));
            }
        },
        (Some(_), _) => return Err(bad("dialect", "must be a string")),
    };
    let Some((format, hint)) = format.and_then(|f: &dyn PluginFormat| Some((f, f.entry_hint()?)))
    else {
        return Ok(DialectFields {
            name,
            ..Default::default()
        });
    };
    let entry = match map.get("entry") {
        Some(Value::String(s)) => {
            let s = s.trim();
            match s.split_once(':') {
                Some((module, class))
                    if !module.trim().is_empty()
                        && !class.trim().is_empty()
                        && !class.contains(':') =>
                {
                    format!("{}:{}", module.trim(), class.trim())
                }
                _ => {
                    return Err(bad(
                        "entry",
                        &format!("must be \"<module>:<Class>\" (e.g. \"my_plugin.plugin:MyPlugin\"), found '{s}'"),
                    ))
                }
            }
        }
        None | Some(Value::Null) => {
            return Err(bad(
                "entry",
                &format!("is required for dialect: {} ({hint})", format.id()),
            ))
        }
        Some(_) => return Err(bad("entry", "must be a string \"<module>:<Class>\"")),
    };
    let priority = match map.get("priority") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(
            n.as_i64()
                .ok_or_else(|| bad("priority", "must be a whole number"))?,
        ),
        Some(_) => {
            return Err(bad(
                "priority",
                "must be a whole number (lower loads first)",
            ))
        }
    };
    let args = match map.get("args") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => {
            return Err(bad(
                "args",
                "must be a mapping of constructor keyword arguments",
            ))
        }
    };
    Ok(DialectFields {
        name,
        entry: Some(entry),
        dependencies: list_field("dependencies")?,
        priority,
        args,
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}
