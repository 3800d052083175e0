//! Where Felix plugins come from: installed entry points of group
//! `felix.plugins` on the interpreter's `sys.path` (read from their
//! `entry_points.txt`, see [`crate::plugins::entry_points`]), and Felix source trees
//! (a directory with no plughost manifest whose `pyproject.toml` declares
//! `[project.entry-points."felix.plugins"]`) under the user and project
//! plugin directories. The key is the entry-point name.
//!
//! Enablement: an installed entry point loads unless it is in
//! `plugins.disabled` (Felix's "install the package and register is
//! called"); a source tree needs `plugins.enabled`, like every user plugin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::core::extensions::Extensions;
use crate::plugins::config::PluginLists;
use crate::plugins::discovery::{Candidate, Source};
use crate::plugins::format::{DialectId, Verdict};
use crate::plugins::manifest::{Manifest, PluginKind};

/// The dialect's name, as candidates and `plugins list` show it.
pub const DIALECT: DialectId = DialectId::new("felix");

/// The entry-point group Felix reads.
pub const GROUP: &str = "felix.plugins";

/// What loading a discovered key needs: its `module:attr` and, for a source
/// tree, the directory to put on `sys.path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntrySpec {
    pub value: String,
    pub source_dir: Option<PathBuf>,
}

/// Entries a host's discovery found, by (key, candidate directory); kept
/// in the host's [`Extensions`] for its loads.
#[derive(Default)]
struct Found(Mutex<HashMap<(String, PathBuf), EntrySpec>>);

fn remember(state: &Extensions, key: &str, dir: &Path, spec: EntrySpec) {
    state
        .get::<Found>()
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((key.to_string(), dir.to_path_buf()), spec);
}

/// The entry of `key` found at `dir`: remembered from the host's
/// discovery, else read again from the source tree's `pyproject.toml`.
pub fn entry_for(state: &Extensions, key: &str, dir: &Path) -> Result<EntrySpec, String> {
    let remembered = state.peek::<Found>().and_then(|found| {
        found
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(key.to_string(), dir.to_path_buf()))
            .cloned()
    });
    if let Some(spec) = remembered {
        return Ok(spec);
    }
    // Not remembered (a worker loads without discovery): an installed
    // distribution's entry point, `dir` being where it is installed.
    let installed = crate::plugins::entry_points::scan(&[dir.to_path_buf()], GROUP);
    if let Some(entry) = installed.entries.into_iter().find(|e| e.name == key) {
        return Ok(EntrySpec {
            value: entry.value,
            source_dir: None,
        });
    }
    let project = read_pyproject(dir)?;
    project
        .entries
        .into_iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| EntrySpec {
            value,
            source_dir: Some(source_dir(dir)),
        })
        .ok_or_else(|| {
            format!(
                "{} declares no felix.plugins entry point '{key}'",
                dir.join("pyproject.toml").display()
            )
        })
}

/// Every Felix plugin: installed entry points, then source trees of the
/// user and project plugin directories.
pub fn discover(
    state: &Extensions,
    home: &Path,
    lists: &PluginLists,
    search_path: &[PathBuf],
) -> Vec<Candidate> {
    let mut found = Vec::new();
    let scan = crate::plugins::entry_points::scan(search_path, GROUP);
    for problem in &scan.problems {
        tracing::warn!("felix.plugins entry points: {problem}");
    }
    for entry in scan.entries {
        let disabled = lists.disabled.contains(&entry.name);
        remember(
            state,
            &entry.name,
            &entry.location,
            EntrySpec {
                value: entry.value.clone(),
                source_dir: None,
            },
        );
        let manifest = manifest_of(
            &entry.name,
            &entry.version,
            &summary_of(&entry.metadata_dir),
            &entry.metadata_dir,
        );
        found.push(Candidate {
            key: entry.name.clone(),
            source: Source::Entrypoint,
            dir: entry.location.clone(),
            manifest: Ok(manifest),
            enabled: !disabled,
            skip_reason: disabled.then_some(Verdict::Disabled),
            missing: false,
            dialect: DIALECT,
        });
    }
    let mut roots = vec![(Source::User, home.join("plugins"))];
    let project_on = std::env::var("PLUGHOST_ENABLE_PROJECT_PLUGINS")
        .map(|v| crate::plugins::config::truthy(&v))
        .unwrap_or(false);
    if project_on {
        roots.push((Source::Project, PathBuf::from(".plughost").join("plugins")));
    }
    for (source, root) in roots {
        for dir in source_trees(&root) {
            found.extend(examine(state, source, &dir, lists));
        }
    }
    found
}

/// Directories of `root` that are Felix source trees: no plughost manifest
/// and a `pyproject.toml`, sorted by name.
fn source_trees(root: &Path) -> Vec<PathBuf> {
    use crate::plugins::snapshot;
    // Through the build's view: discovery listed these directories already.
    let Ok(entries) = snapshot::entries(root) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| !e.name.to_string_lossy().starts_with('.'))
        .map(|e| root.join(&e.name))
        .filter(|p| snapshot::is_dir(p))
        .filter(|p| crate::plugins::manifest::find_manifest(p).is_none())
        .filter(|p| snapshot::is_file(&p.join("pyproject.toml")))
        .collect()
}

/// `<dir>/src` when present, else `<dir>`: what goes on `sys.path`.
pub fn source_dir(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    if src.is_dir() {
        src
    } else {
        dir.to_path_buf()
    }
}

fn examine(state: &Extensions, source: Source, dir: &Path, lists: &PluginLists) -> Vec<Candidate> {
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let enablement = |key: &str| {
        if lists.disabled.iter().any(|k| k == key) {
            (false, Some(Verdict::Disabled))
        } else if lists.enabled.iter().any(|k| k == key) {
            (true, None)
        } else {
            (
                false,
                Some(Verdict::NotEnabled(format!(
                    "not in plugins.enabled (run: plughost plugins enable {key})"
                ))),
            )
        }
    };
    let project = match read_pyproject(dir) {
        Ok(p) if !p.entries.is_empty() => p,
        // A pyproject of another kind of project: not a Felix plugin.
        Ok(_) => return Vec::new(),
        Err(problem) => {
            let (enabled, skip) = enablement(&dir_name);
            return vec![Candidate {
                key: dir_name,
                source,
                dir: dir.to_path_buf(),
                manifest: Err(problem.clone()),
                enabled,
                skip_reason: Some(if enabled {
                    Verdict::Unloadable(problem)
                } else {
                    skip.unwrap_or(Verdict::Unloadable(problem))
                }),
                missing: false,
                dialect: DIALECT,
            }];
        }
    };
    project
        .entries
        .iter()
        .map(|(key, value)| {
            remember(
                state,
                key,
                dir,
                EntrySpec {
                    value: value.clone(),
                    source_dir: Some(source_dir(dir)),
                },
            );
            let (enabled, skip_reason) = enablement(key);
            Candidate {
                key: key.clone(),
                source,
                dir: dir.to_path_buf(),
                manifest: Ok(manifest_of(
                    key,
                    &project.version,
                    &project.description,
                    &dir.join("pyproject.toml"),
                )),
                enabled,
                skip_reason,
                missing: false,
                dialect: DIALECT,
            }
        })
        .collect()
}

fn manifest_of(key: &str, version: &str, description: &str, path: &Path) -> Manifest {
    Manifest {
        name: key.to_string(),
        version: version.to_string(),
        manifest_version: 1,
        description: description.to_string(),
        author: String::new(),
        kind: PluginKind::Standalone,
        requires_env: Vec::new(),
        provides_tools: Vec::new(),
        provides_hooks: Vec::new(),
        provides_web_providers: Vec::new(),
        dialect: Default::default(),
        path: path.to_path_buf(),
        warnings: Vec::new(),
    }
}

/// `Summary:` of a distribution's metadata (its description).
fn summary_of(metadata_dir: &Path) -> String {
    ["METADATA", "PKG-INFO"]
        .iter()
        .find_map(|f| std::fs::read_to_string(metadata_dir.join(f)).ok())
        .and_then(|text| {
            text.lines()
                .take_while(|l| !l.is_empty())
                .find_map(|l| l.strip_prefix("Summary:").map(|s| s.trim().to_string()))
        })
        .unwrap_or_default()
}

/// What plughost reads of a source tree's `pyproject.toml`.
#[derive(Debug, Default, PartialEq)]
pub struct PyProject {
    pub name: String,
    pub version: String,
    pub description: String,
    /// `felix.plugins` entry points, in file order.
    pub entries: Vec<(String, String)>,
}

/// Read `<dir>/pyproject.toml`; a problem names the file and the fault.
pub fn read_pyproject(dir: &Path) -> Result<PyProject, String> {
    let path = dir.join("pyproject.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_pyproject(&text).map_err(|e| format!("malformed {}: {e}", path.display()))
}

/// Parse a pyproject text (see [`PyProject`]).
pub fn parse_pyproject(text: &str) -> Result<PyProject, String> {
    let doc: toml_edit::Document<String> = text
        .parse()
        .map_err(|e: toml_edit::TomlError| e.message().to_string())?;
    let mut out = PyProject::default();
    let Some(project) = doc.get("project").and_then(|p| p.as_table_like()) else {
        return Ok(out);
    };
    let text_of = |key: &str| {
        project
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    out.name = text_of("name");
    out.version = text_of("version");
    out.description = text_of("description");
    let Some(group) = project
        .get("entry-points")
        .and_then(|e| e.as_table_like())
        .and_then(|e| e.get(GROUP))
    else {
        return Ok(out);
    };
    let group = group
        .as_table_like()
        .ok_or_else(|| format!("[project.entry-points.\"{GROUP}\"] is not a table"))?;
    for (name, value) in group.iter() {
        let value = value.as_str().ok_or_else(|| {
            format!("entry point '{name}' in [project.entry-points.\"{GROUP}\"] is not a string 'module:attr'")
        })?;
        out.entries
            .push((name.to_string(), value.trim().to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pyproject_entry_points_name_version_description() {
        let p = parse_pyproject(
            "[project]\nname = \"felix-plugin-example\"\nversion = \"0.2.0\"\ndescription = \"Example\"\n\n[project.entry-points.\"felix.plugins\"]\nexample = \"felix_plugin_example:register\"\nsecond = \"pkg.mod:obj.register\"\n",
        )
        .unwrap();
        assert_eq!(p.version, "0.2.0");
        assert_eq!(p.description, "Example");
        assert_eq!(
            p.entries,
            vec![
                ("example".into(), "felix_plugin_example:register".into()),
                ("second".into(), "pkg.mod:obj.register".into())
            ]
        );
        assert!(parse_pyproject("[project]\nname = \"x\"\n")
            .unwrap()
            .entries
            .is_empty());
        let bad = parse_pyproject("[project\nname=").unwrap_err();
        assert!(!bad.is_empty());
        let wrong =
            parse_pyproject("[project.entry-points.\"felix.plugins\"]\nx = 3\n").unwrap_err();
        assert!(wrong.contains("entry point 'x'"), "{wrong}");
    }
}
