//! `plugins install` and `plugins remove`: getting plugin directories into
//! (and out of) `<home>/plugins/` safely.
//!
//! Sources: a git URL (https, ssh, `git@host:path`, `file://`), `owner/repo`
//! (GitHub, or the host in `PLUGHOST_GIT_BASE_URL` — a mirror or an
//! enterprise server), `owner/repo/sub/path`, a URL with a `#sub/path` fragment, or a
//! local directory. Cloning uses the `git` program (shallow). Only the plugin
//! directory is copied, through a staging directory renamed into place, so a
//! refused or failed install leaves nothing behind. Special files (FIFOs,
//! devices, sockets) are refused before anything in the plugin is opened:
//! reading a FIFO would wait forever. A scratch directory carries its
//! owner's pid, so one left by a killed install is swept by the next
//! install or `plugins list` ([`sweep_interrupted`]).

mod fetch;
mod place;
pub mod risk;
mod source;
// --- issue 48: userConfig options asked for at install ---
pub(crate) mod staging;
pub mod user_config;

use std::path::{Path, PathBuf};

use crate::plugins::format::{DialectId, Formats};
use crate::plugins::lock::{self, Capabilities, Content, LockEntry};
use crate::plugins::manifest;

use fetch::git_clone;
use place::{copy_plugin, refuse_special_files, swap_into_place};
pub use source::parse_source;
use source::{check_subpath, resolve_inside};

/// Where a plugin comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginSource {
    Git {
        url: String,
        subpath: Option<String>,
    },
    Local {
        path: PathBuf,
        subpath: Option<String>,
    },
}

/// Why an install or remove was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0}")]
    BadSource(String),
    #[error("unsafe sub-path '{0}': {1}")]
    UnsafeSubpath(String, String),
    #[error("could not clone {url}: {kind} ({detail})")]
    Clone {
        url: String,
        kind: &'static str,
        detail: String,
    },
    #[error("{0} is not a plugin: {1}")]
    NotAPlugin(PathBuf, String),
    #[error("a plugin named '{name}' is already installed at {path}; pass --force to replace it")]
    Exists { name: String, path: PathBuf },
    #[error("{path} is {kind}; a plugin may hold only regular files, directories and links to them — remove it and try again")]
    SpecialFile { path: PathBuf, kind: &'static str },
    #[error("{0}")]
    Remove(String),
    #[error("'{rev}' is not a revision of {url}: {detail}; nothing was installed or replaced")]
    BadRef {
        rev: String,
        url: String,
        detail: String,
    },
    #[error("plugin '{name}' does not match its lock entry: the lock records {expected}, the files fetched hash to {actual}; it was not installed")]
    HashMismatch {
        name: String,
        expected: String,
        actual: String,
    },
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    /// Its dependencies could not be installed ([`Options::prepare`]); it
    /// was not installed.
    #[error("{0}")]
    Dependencies(String),
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> InstallError + '_ {
    move |e| InstallError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Scratch directories of installs in `<home>/plugins/` (hidden, so
/// discovery skips them).
const SCRATCH: &str = ".install-";

/// Remove the scratch directories interrupted installs left in
/// `<home>/plugins/` (a clone, a half-copied plugin); how many.
pub fn sweep_interrupted(home: &Path) -> usize {
    staging::sweep(&home.join("plugins"), SCRATCH)
}

/// What an install did.
#[derive(Debug)]
pub struct Installed {
    pub name: String,
    pub version: String,
    pub path: PathBuf,
    pub replaced: bool,
    /// SOURCE as `plugins install` takes it to get this plugin again.
    pub source: String,
    /// The commit checked out (git sources).
    pub commit: Option<String>,
    /// The API its manifest (or project files) say it is written for.
    pub dialect: DialectId,
    /// What its manifest declares.
    pub capabilities: Capabilities,
    /// Its files as installed; `None` for an editable install.
    pub content: Option<Content>,
}

impl Installed {
    /// Its lock entry, loading through `dialect`.
    pub fn lock_entry(&self, dialect: &str) -> LockEntry {
        LockEntry {
            source: self.source.clone(),
            commit: self.commit.clone(),
            hash: self.content.as_ref().map(|c| c.hash.clone()),
            files: self
                .content
                .as_ref()
                .map(|c| c.files.clone())
                .unwrap_or_default(),
            dialect: dialect.to_string(),
            version: self.version.clone(),
            capabilities: self.capabilities.clone(),
            editable: self.content.is_none(),
            environment: None,
            requirements: Vec::new(),
            dependencies: Default::default(),
        }
    }
}

/// How to install.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// Replace an installed plugin of the same name.
    pub force: bool,
    /// Check out this commit, branch or tag of a git source (a local
    /// directory with `--ref` is cloned from its repository).
    pub git_ref: Option<&'a str>,
    /// Refuse the plugin unless its files hash to this (`--from-lock`).
    pub expect_hash: Option<&'a str>,
    /// Link the local directory instead of copying it (a development
    /// install, never checked against the lock).
    pub editable: bool,
    /// Run on the plugin's files (and its name) once they are staged and
    /// before they replace anything: installs its dependencies; an error
    /// refuses the install and leaves the installed plugin as it was.
    pub prepare: Option<Prepare<'a>>,
}

/// The step [`Options::prepare`] runs.
#[derive(Clone, Copy)]
pub struct Prepare<'a>(pub &'a dyn Fn(&Path, &str) -> Result<(), String>);

impl std::fmt::Debug for Prepare<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepare(..)")
    }
}

/// Install from `source` into `<home>/plugins/`;
/// `formats` (the dialect table's) say what a plugin directory must hold.
pub fn install(
    home: &Path,
    source: &PluginSource,
    force: bool,
    formats: Formats<'_>,
) -> Result<Installed, InstallError> {
    let options = Options {
        force,
        ..Options::default()
    };
    install_with(home, source, &options, formats)
}

/// [`install`] with every option.
pub fn install_with(
    home: &Path,
    source: &PluginSource,
    options: &Options<'_>,
    formats: Formats<'_>,
) -> Result<Installed, InstallError> {
    let plugins = home.join("plugins");
    std::fs::create_dir_all(&plugins).map_err(io_err(&plugins))?;
    sweep_interrupted(home);
    let scratch = tempfile::Builder::new()
        .prefix(&staging::prefix(SCRATCH))
        .tempdir_in(&plugins)
        .map_err(io_err(&plugins))?;
    let located = locate(source, options, scratch.path())?;
    let plugin_dir = located.dir;
    if !options.editable {
        refuse_special_files(&plugin_dir)?;
    }
    let found = identify(&plugin_dir, formats)?;
    let name = found.name;
    let target = plugins.join(&name);
    let exists = target.exists() || target.is_symlink();
    if exists && !options.force {
        return Err(InstallError::Exists { name, path: target });
    }
    let staged = scratch.path().join("plugin");
    let content = if options.editable {
        std::os::unix::fs::symlink(&plugin_dir, &staged).map_err(io_err(&staged))?;
        None
    } else {
        copy_plugin(&plugin_dir, &plugin_dir, &staged)?;
        let content = lock::content_hash(&staged).map_err(io_err(&staged))?;
        if let Some(expected) = options.expect_hash {
            if content.hash != expected {
                return Err(InstallError::HashMismatch {
                    name,
                    expected: expected.to_string(),
                    actual: content.hash,
                });
            }
        }
        Some(content)
    };
    if let Some(Prepare(prepare)) = options.prepare {
        prepare(&staged, &name).map_err(InstallError::Dependencies)?;
    }
    let previous = exists.then(|| scratch.path().join("previous"));
    if let Err(e) = swap_into_place(&staged, &target, previous.as_deref(), |from, to| {
        std::fs::rename(from, to)
    }) {
        if previous
            .as_deref()
            .is_some_and(|p| std::fs::symlink_metadata(p).is_ok())
        {
            // The old plugin could not be put back: dropping the scratch
            // directory would delete the only copy, so it stays on disk
            // where the error message says.
            let _ = scratch.keep();
        }
        return Err(e);
    }
    // The old copy goes with the scratch directory, now that the new one is
    // in place.
    drop(scratch);
    Ok(Installed {
        name,
        version: found.version,
        path: target,
        replaced: exists,
        source: located.source,
        commit: located.commit,
        dialect: found.dialect,
        capabilities: found.capabilities,
        content,
    })
}

/// The plugin directory a source names, fetched into `scratch` when it is
/// a git source.
struct Located {
    dir: PathBuf,
    commit: Option<String>,
    /// SOURCE to get it again.
    source: String,
}

fn with_fragment(base: &str, subpath: Option<&str>) -> String {
    match subpath {
        Some(sub) => format!("{base}#{sub}"),
        None => base.to_string(),
    }
}

fn locate(
    source: &PluginSource,
    options: &Options<'_>,
    scratch: &Path,
) -> Result<Located, InstallError> {
    match (source, options.git_ref) {
        (PluginSource::Local { .. }, Some(_)) | (PluginSource::Git { .. }, _)
            if options.editable =>
        {
            Err(InstallError::BadSource(
                "--editable takes a local directory (not a git source, nor --ref)".into(),
            ))
        }
        (PluginSource::Local { path, subpath }, None) => {
            let dir = resolve_inside(path, subpath.as_deref())?;
            Ok(Located {
                source: dir.display().to_string(),
                dir,
                commit: None,
            })
        }
        (PluginSource::Local { path, subpath }, Some(_)) => {
            // `--ref` with a local directory: clone its repository at REV,
            // the directory being a sub-path of it.
            let dir = resolve_inside(path, subpath.as_deref())?;
            let top = fetch::work_tree_top(&dir)
                .and_then(|t| t.canonicalize().ok())
                .ok_or_else(|| {
                    InstallError::BadSource(format!(
                        "--ref needs a git source; {} is not in a git repository",
                        dir.display()
                    ))
                })?;
            let inner = dir.strip_prefix(&top).unwrap_or(Path::new(""));
            let inner = inner.to_string_lossy().into_owned();
            let git = PluginSource::Git {
                url: top.display().to_string(),
                subpath: (!inner.is_empty()).then_some(inner),
            };
            locate(&git, options, scratch)
        }
        (PluginSource::Git { url, subpath }, rev) => {
            if let Some(sub) = subpath {
                check_subpath(sub)?;
            }
            let checkout = scratch.join("checkout");
            let commit = match rev {
                Some(rev) => Some(fetch::git_clone_at(url, rev, &checkout)?),
                None => {
                    git_clone(url, &checkout)?;
                    fetch::head_commit(&checkout)
                }
            };
            Ok(Located {
                dir: resolve_inside(&checkout, subpath.as_deref())?,
                commit,
                source: with_fragment(url, subpath.as_deref()),
            })
        }
    }
}

/// What a plugin directory declares.
struct Identified {
    name: String,
    version: String,
    dialect: DialectId,
    capabilities: Capabilities,
}

/// Read `plugin_dir`'s manifest (or, for a format whose project files
/// declare the key, those) and check it can be a plugin directory.
fn identify(plugin_dir: &Path, formats: Formats<'_>) -> Result<Identified, InstallError> {
    // A format whose manifest no `dialect:` names (an Agent Plugins v1
    // `plugin.json`) claims its directory before the manifest of the
    // default format is read from the same file.
    let claimed = formats
        .all()
        .filter(|f| !f.named_by_manifest())
        .find_map(|f| match f.without_manifest(plugin_dir) {
            Some(Ok(found)) => Some((f.id(), found)),
            _ => None,
        });
    let found = match (claimed, manifest::load_with(plugin_dir, formats)) {
        (Some((dialect, (name, version))), _) => Identified {
            name,
            version,
            dialect,
            capabilities: Capabilities::default(),
        },
        (None, loaded) => match loaded {
            Ok(m) => {
                let format = formats.of(&m);
                if let Some(problem) = format.layout_problem(&m, plugin_dir) {
                    return Err(InstallError::NotAPlugin(plugin_dir.to_path_buf(), problem));
                }
                Identified {
                    dialect: format.id(),
                    capabilities: Capabilities {
                        hooks: m.provides_hooks,
                        tools: m.provides_tools,
                        web_providers: m.provides_web_providers,
                    },
                    name: m.name,
                    version: m.version,
                }
            }
            // No manifest: a format whose own project files declare the key
            // (a Felix source tree's pyproject.toml) installs it under that key.
            Err(manifest::ManifestError::Missing) => {
                let claimed = formats
                    .all()
                    .find_map(|f| f.without_manifest(plugin_dir).map(|r| (f.id(), r)));
                match claimed {
                    Some((dialect, Ok((name, version)))) => Identified {
                        name,
                        version,
                        dialect,
                        capabilities: Capabilities::default(),
                    },
                    Some((_, Err(problem))) => {
                        return Err(InstallError::NotAPlugin(plugin_dir.to_path_buf(), problem))
                    }
                    None => {
                        let problem = manifest::ManifestError::Missing.to_string();
                        return Err(InstallError::NotAPlugin(plugin_dir.to_path_buf(), problem));
                    }
                }
            }
            Err(e) => {
                return Err(InstallError::NotAPlugin(
                    plugin_dir.to_path_buf(),
                    e.to_string(),
                ))
            }
        },
    };
    let name = &found.name;
    if name.starts_with('.') || name.contains(['/', '\\']) || name.trim().is_empty() {
        return Err(InstallError::NotAPlugin(
            plugin_dir.to_path_buf(),
            format!("manifest name '{name}' cannot be a directory name"),
        ));
    }
    Ok(found)
}

/// Delete the user plugin directory `dir`; an editable install's link is
/// removed, never the directory it points to.
pub fn remove_dir(dir: &Path) -> Result<(), InstallError> {
    let is_link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        return std::fs::remove_file(dir).map_err(io_err(dir));
    }
    std::fs::remove_dir_all(dir).map_err(io_err(dir))
}
