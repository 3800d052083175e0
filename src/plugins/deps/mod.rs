//! A plugin's Python dependencies: what it declares, and the environments
//! uv installs them into.
//!
//! A plugin declares its requirements (PEP 508 strings) in any of: its
//! `pyproject.toml` (`[project].dependencies`, `requires-python`), a
//! Hermes manifest's `pip_dependencies` / `python_dependencies`, a
//! `requirements.txt`, or a distribution's metadata (`PKG-INFO`, or
//! `*.dist-info/METADATA`: `Requires-Dist`, `Requires-Python`) — all of
//! them, when it has several. plughost never resolves them itself: uv
//! ([`uv`]) does, and its verdict (exit status) decides.
//!
//! In-process plugins share one environment, `<home>/envs/shared`
//! ([`shared`]), resolved from every such plugin's requirements at once,
//! so that two plugins needing incompatible versions are refused at
//! install instead of breaking at import. A plugin in its own environment
//! ([`own`]: isolated, or installed with `--own-env`) has a virtualenv
//! `<home>/envs/plugins/<name>` of its own, on the CPython its
//! `requires-python` asks for, and always runs in a worker process.

pub mod own;
pub mod shared;
pub mod uv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `<home>/envs`: where plugin environments live.
pub fn envs_dir(home: &Path) -> PathBuf {
    home.join("envs")
}

/// What one plugin declares it needs from Python.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requirements {
    /// PEP 508 requirement strings, in the order found, without repeats.
    pub requires: Vec<String>,
    /// `requires-python` (a PEP 440 specifier set such as `>=3.12`).
    pub requires_python: Option<String>,
    /// The files they were read from, for messages.
    pub sources: Vec<PathBuf>,
}

impl Requirements {
    /// Whether it declares nothing to install.
    pub fn is_empty(&self) -> bool {
        self.requires.is_empty()
    }

    fn add(&mut self, requirement: &str, from: &Path) {
        let r = requirement.trim();
        if r.is_empty() {
            return;
        }
        if !self.sources.iter().any(|s| s == from) {
            self.sources.push(from.to_path_buf());
        }
        if !self.requires.iter().any(|known| known == r) {
            self.requires.push(r.to_string());
        }
    }
}

/// Why a plugin's dependencies could not be read or installed.
#[derive(Debug, thiserror::Error)]
pub enum DepsError {
    #[error("{path}: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error("plughost installs plugin dependencies with uv, which was not found (neither `uv` on PATH nor `python3 -m uv`): install it with `pip install uv`, or name it in PLUGHOST_UV")]
    UvMissing,
    /// uv refused the set of requirements (its own words in `detail`).
    #[error("{what}:\n{detail}")]
    Unresolvable {
        what: String,
        detail: String,
        /// The plugins whose requirements conflict with the new ones, as
        /// uv found pairwise.
        conflicting: Vec<String>,
    },
    #[error("{0}")]
    NoInterpreter(String),
    #[error("{what}: {message}")]
    Io { what: String, message: String },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DepsError {
    let what = what.into();
    move |e| DepsError::Io {
        what,
        message: e.to_string(),
    }
}

/// Every requirement `dir` declares (see the module docs). A plugin that
/// declares none has empty [`Requirements`].
pub fn read(dir: &Path) -> Result<Requirements, DepsError> {
    let mut out = Requirements::default();
    from_pyproject(dir, &mut out)?;
    from_manifest(dir, &mut out)?;
    from_requirements_txt(&dir.join("requirements.txt"), &mut out)?;
    from_metadata(dir, &mut out)?;
    Ok(out)
}

fn malformed(path: &Path, message: impl Into<String>) -> DepsError {
    DepsError::Malformed {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn from_pyproject(dir: &Path, out: &mut Requirements) -> Result<(), DepsError> {
    let path = dir.join("pyproject.toml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let doc: toml_edit::Document<String> = text
        .parse()
        .map_err(|e: toml_edit::TomlError| malformed(&path, e.message()))?;
    let Some(project) = doc.get("project").and_then(|p| p.as_table_like()) else {
        return Ok(());
    };
    if let Some(deps) = project.get("dependencies") {
        let list = deps
            .as_array()
            .ok_or_else(|| malformed(&path, "[project].dependencies is not a list of strings"))?;
        for item in list.iter() {
            let r = item.as_str().ok_or_else(|| {
                malformed(
                    &path,
                    "[project].dependencies holds a value that is not a string",
                )
            })?;
            out.add(r, &path);
        }
    }
    if let Some(rp) = project.get("requires-python").and_then(|v| v.as_str()) {
        out.requires_python = Some(rp.trim().to_string());
        if !out.sources.contains(&path) {
            out.sources.push(path.clone());
        }
    }
    Ok(())
}

/// A Hermes manifest's `pip_dependencies` and `python_dependencies`
/// (lists of requirement strings; read from the raw manifest, which other
/// plugin APIs ignore).
fn from_manifest(dir: &Path, out: &mut Requirements) -> Result<(), DepsError> {
    let Some(path) = crate::plugins::manifest::MANIFEST_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
    else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&path).map_err(io(path.display().to_string()))?;
    let root: serde_json::Value = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| malformed(&path, e.to_string()))?
    } else if text.trim().is_empty() {
        return Ok(());
    } else {
        serde_saphyr::from_str(&text).map_err(|e| malformed(&path, e.to_string()))?
    };
    for field in ["pip_dependencies", "python_dependencies"] {
        match root.get(field) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Array(items)) => {
                for item in items {
                    let r = item.as_str().ok_or_else(|| {
                        malformed(&path, format!("{field} holds a value that is not a string"))
                    })?;
                    out.add(r, &path);
                }
            }
            Some(serde_json::Value::String(one)) => out.add(one, &path),
            Some(_) => {
                return Err(malformed(
                    &path,
                    format!("{field} is not a list of requirement strings"),
                ))
            }
        }
    }
    Ok(())
}

/// `requirements.txt`: one requirement a line; comments, blank lines and
/// pip options (`-r`, `--index-url`, …) are skipped, not followed.
fn from_requirements_txt(path: &Path, out: &mut Requirements) -> Result<(), DepsError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('-') {
            continue;
        }
        out.add(line, path);
    }
    Ok(())
}

/// A distribution's core metadata in the plugin directory: `PKG-INFO`, or
/// one `*.dist-info/METADATA` / `*.egg-info/PKG-INFO`. Requirements of
/// extras (`; extra == "…"`) are not installed.
fn from_metadata(dir: &Path, out: &mut Requirements) -> Result<(), DepsError> {
    let mut files = vec![dir.join("PKG-INFO")];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".dist-info") {
                files.push(entry.path().join("METADATA"));
            } else if name.ends_with(".egg-info") {
                files.push(entry.path().join("PKG-INFO"));
            }
        }
    }
    for path in files.iter().filter(|p| p.is_file()) {
        let text = std::fs::read_to_string(path).map_err(io(path.display().to_string()))?;
        let headers = metadata_headers(&text);
        for r in headers.get("requires-dist").into_iter().flatten() {
            if !r.contains("extra ==") && !r.contains("extra==") {
                out.add(r, path);
            }
        }
        if let Some(rp) = headers.get("requires-python").and_then(|v| v.first()) {
            out.requires_python.get_or_insert_with(|| rp.clone());
        }
    }
    Ok(())
}

/// The headers of an RFC 822 metadata file (up to the first blank line),
/// by lower-cased name.
fn metadata_headers(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if !name.starts_with([' ', '\t']) {
                headers
                    .entry(name.trim().to_ascii_lowercase())
                    .or_default()
                    .push(value.trim().to_string());
            }
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_is_read_and_repeats_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            d.join("pyproject.toml"),
            "[project]\nname='p'\ndependencies=['a==1', 'b>=2']\nrequires-python='>=3.12'\n",
        )
        .unwrap();
        std::fs::write(
            d.join("plugin.yaml"),
            "name: p\npip_dependencies: [c]\npython_dependencies: ['a==1']\n",
        )
        .unwrap();
        std::fs::write(
            d.join("requirements.txt"),
            "# pins\nd<3  # why\n-r other.txt\n",
        )
        .unwrap();
        std::fs::create_dir(d.join("p-1.0.dist-info")).unwrap();
        std::fs::write(
            d.join("p-1.0.dist-info/METADATA"),
            "Metadata-Version: 2.1\nName: p\nRequires-Dist: e\nRequires-Dist: f; extra == \"x\"\n\nbody: g\n",
        )
        .unwrap();
        let r = read(d).unwrap();
        assert_eq!(r.requires, ["a==1", "b>=2", "c", "d<3", "e"]);
        assert_eq!(r.requires_python.as_deref(), Some(">=3.12"));
        assert_eq!(r.sources.len(), 4);
    }

    #[test]
    fn a_plugin_without_declarations_needs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plugin.yaml"), "name: p\n").unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
    }
}
