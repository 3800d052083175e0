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
mod source;
pub(crate) mod staging;

use std::path::{Path, PathBuf};

use crate::plugins::format::Formats;
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
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
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
}

/// Install from `source` into `<home>/plugins/`;
/// `formats` (the dialect table's) say what a plugin directory must hold.
pub fn install(
    home: &Path,
    source: &PluginSource,
    force: bool,
    formats: Formats<'_>,
) -> Result<Installed, InstallError> {
    let plugins = home.join("plugins");
    std::fs::create_dir_all(&plugins).map_err(io_err(&plugins))?;
    sweep_interrupted(home);
    let scratch = tempfile::Builder::new()
        .prefix(&staging::prefix(SCRATCH))
        .tempdir_in(&plugins)
        .map_err(io_err(&plugins))?;
    let plugin_dir = match source {
        PluginSource::Local { path, subpath } => resolve_inside(path, subpath.as_deref())?,
        PluginSource::Git { url, subpath } => {
            if let Some(sub) = subpath {
                check_subpath(sub)?;
            }
            let checkout = scratch.path().join("checkout");
            git_clone(url, &checkout)?;
            resolve_inside(&checkout, subpath.as_deref())?
        }
    };
    refuse_special_files(&plugin_dir)?;
    let (name, version) = match manifest::load_with(&plugin_dir, formats) {
        Ok(m) => {
            if let Some(problem) = formats.of(&m).layout_problem(&m, &plugin_dir) {
                return Err(InstallError::NotAPlugin(plugin_dir, problem));
            }
            (m.name, m.version)
        }
        // No manifest: a format whose own project files declare the key
        // (a Felix source tree's pyproject.toml) installs it under that key.
        Err(manifest::ManifestError::Missing) => {
            match formats.all().find_map(|f| f.without_manifest(&plugin_dir)) {
                Some(Ok(key_and_version)) => key_and_version,
                Some(Err(problem)) => return Err(InstallError::NotAPlugin(plugin_dir, problem)),
                None => {
                    let problem = manifest::ManifestError::Missing.to_string();
                    return Err(InstallError::NotAPlugin(plugin_dir, problem));
                }
            }
        }
        Err(e) => return Err(InstallError::NotAPlugin(plugin_dir, e.to_string())),
    };
    if name.starts_with('.') || name.contains(['/', '\\']) || name.trim().is_empty() {
        return Err(InstallError::NotAPlugin(
            plugin_dir,
            format!("manifest name '{name}' cannot be a directory name"),
        ));
    }
    let target = plugins.join(&name);
    let exists = target.exists() || target.is_symlink();
    if exists && !force {
        return Err(InstallError::Exists { name, path: target });
    }
    let staged = scratch.path().join("plugin");
    copy_plugin(&plugin_dir, &plugin_dir, &staged)?;
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
        version,
        path: target,
        replaced: exists,
    })
}

/// Delete the user plugin directory `dir`.
pub fn remove_dir(dir: &Path) -> Result<(), InstallError> {
    std::fs::remove_dir_all(dir).map_err(io_err(dir))
}
