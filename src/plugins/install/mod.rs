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

pub(crate) mod staging;

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use crate::plugins::format::Formats;
use crate::plugins::manifest;

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

/// Parse the SOURCE argument of `plugins install`.
pub fn parse_source(raw: &str) -> Result<PluginSource, InstallError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(InstallError::BadSource("no source given".into()));
    }
    let (base, fragment) = match raw.split_once('#') {
        Some((b, f)) => (
            b,
            Some(f.trim_end_matches('/').to_string()).filter(|f| !f.is_empty()),
        ),
        None => (raw, None),
    };
    let looks_local = base.starts_with('/')
        || base.starts_with("./")
        || base.starts_with("../")
        || base.starts_with('~')
        || base == ".";
    let is_url = ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|p| base.starts_with(p));
    let is_scp = !is_url && base.contains('@') && base.contains(':') && !base.contains("://");
    if !is_url && !is_scp && (looks_local || Path::new(base).is_dir()) {
        let path = expand_tilde(base);
        if !path.is_dir() {
            return Err(InstallError::BadSource(format!(
                "no such directory: {}",
                path.display()
            )));
        }
        return Ok(PluginSource::Local {
            path,
            subpath: fragment,
        });
    }
    if is_url || is_scp {
        return Ok(PluginSource::Git {
            url: base.to_string(),
            subpath: fragment,
        });
    }
    let segments: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    let valid = |s: &&str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    if segments.len() >= 2 && segments[..2].iter().all(valid) {
        let (owner, repo) = (segments[0], segments[1].trim_end_matches(".git"));
        let inner = (segments.len() > 2).then(|| segments[2..].join("/"));
        if inner.is_some() && fragment.is_some() {
            return Err(InstallError::BadSource(
                "give the sub-path either as owner/repo/sub/path or as a #fragment, not both"
                    .into(),
            ));
        }
        let base =
            std::env::var("PLUGHOST_GIT_BASE_URL").unwrap_or_else(|_| "https://github.com".into());
        let base = base.trim_end_matches('/');
        return Ok(PluginSource::Git {
            url: format!("{base}/{owner}/{repo}.git"),
            subpath: inner.or(fragment),
        });
    }
    Err(InstallError::BadSource(format!(
        "'{raw}' is not a git URL, owner/repo[/sub/path], or an existing directory"
    )))
}

fn expand_tilde(p: &str) -> PathBuf {
    match p.strip_prefix('~') {
        Some(rest) => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(rest.trim_start_matches('/')),
        None => PathBuf::from(p),
    }
}

/// Reject sub-paths that could leave the repository before touching disk.
fn check_subpath(subpath: &str) -> Result<(), InstallError> {
    let path = Path::new(subpath);
    if path.is_absolute() {
        return Err(InstallError::UnsafeSubpath(
            subpath.into(),
            "it is absolute; give a path inside the repository".into(),
        ));
    }
    if path.components().any(|c| {
        matches!(
            c,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    }) {
        return Err(InstallError::UnsafeSubpath(
            subpath.into(),
            "'..' would leave the repository".into(),
        ));
    }
    Ok(())
}

/// Resolve `root/subpath`, following symlinks, and insist it stays in `root`.
fn resolve_inside(root: &Path, subpath: Option<&str>) -> Result<PathBuf, InstallError> {
    let root = root.canonicalize().map_err(io_err(root))?;
    let Some(sub) = subpath else { return Ok(root) };
    check_subpath(sub)?;
    let joined = root.join(sub);
    if !joined.exists() {
        return Err(InstallError::UnsafeSubpath(
            sub.into(),
            "no such path in the repository".into(),
        ));
    }
    let resolved = joined.canonicalize().map_err(io_err(&joined))?;
    if !resolved.starts_with(&root) {
        return Err(InstallError::UnsafeSubpath(
            sub.into(),
            "a symlink points outside the repository".into(),
        ));
    }
    if !resolved.is_dir() {
        return Err(InstallError::UnsafeSubpath(
            sub.into(),
            "not a directory".into(),
        ));
    }
    Ok(resolved)
}

/// Scratch directories of installs in `<home>/plugins/` (hidden, so
/// discovery skips them).
const SCRATCH: &str = ".install-";

/// Remove the scratch directories interrupted installs left in
/// `<home>/plugins/` (a clone, a half-copied plugin); how many.
pub fn sweep_interrupted(home: &Path) -> usize {
    staging::sweep(&home.join("plugins"), SCRATCH)
}

/// What a special file is called in messages; `None` for a regular file,
/// a directory or a link.
fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else {
        None
    }
}

/// Refuse special files, or links to them, anywhere in the plugin tree that
/// is copied. Only metadata is read: nothing is opened.
fn refuse_special_files(dir: &Path) -> Result<(), InstallError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        if name == ".git" || name == "__pycache__" {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
        let file_type = if meta.file_type().is_symlink() {
            // What the link points to; a broken link is reported by the copy.
            match std::fs::metadata(&path) {
                Ok(target) => target.file_type(),
                Err(_) => continue,
            }
        } else {
            meta.file_type()
        };
        if let Some(kind) = special_kind(file_type) {
            return Err(InstallError::SpecialFile { path, kind });
        }
        // A linked directory is checked where it really is (inside the
        // plugin, or the copy refuses it).
        if meta.is_dir() {
            refuse_special_files(&path)?;
        }
    }
    Ok(())
}

/// Copy one regular file. Opened without blocking and without following a
/// link, and checked once open: a FIFO swapped in after the check is
/// refused, not waited on.
fn copy_regular(src: &Path, dst: &Path) -> Result<(), InstallError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(src)
        .map_err(io_err(src))?;
    let meta = from.metadata().map_err(io_err(src))?;
    if let Some(kind) = special_kind(meta.file_type()) {
        return Err(InstallError::SpecialFile {
            path: src.to_path_buf(),
            kind,
        });
    }
    let mut to = std::fs::File::create(dst).map_err(io_err(dst))?;
    std::io::copy(&mut from, &mut to).map_err(io_err(src))?;
    to.set_permissions(meta.permissions())
        .map_err(io_err(dst))?;
    Ok(())
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

/// Put `staged` at `target`; with `previous`, the plugin already at `target`
/// is first moved there. Should the new copy fail to land, the old one is
/// moved back, so a failed `--force` leaves the installed plugin as it was
/// instead of leaving no plugin at all. `rename` is `std::fs::rename` except
/// in tests, which inject failures no file system produces on demand.
fn swap_into_place(
    staged: &Path,
    target: &Path,
    previous: Option<&Path>,
    rename: impl Fn(&Path, &Path) -> std::io::Result<()>,
) -> Result<(), InstallError> {
    if let Some(previous) = previous {
        rename(target, previous).map_err(io_err(target))?;
    }
    let Err(error) = rename(staged, target) else {
        return Ok(());
    };
    let Some(previous) = previous else {
        return Err(io_err(target)(error));
    };
    let message = match rename(previous, target) {
        Ok(()) => format!(
            "could not move the new version into place ({error}); the installed version was left as it was"
        ),
        Err(back) => format!(
            "could not move the new version into place ({error}), nor put the installed version back ({back}); it is kept at {}",
            previous.display()
        ),
    };
    Err(InstallError::Io {
        path: target.to_path_buf(),
        message,
    })
}

/// Copy a plugin tree: no `.git` or `__pycache__`; a symlink is copied as
/// what it points to, and refused when that lies outside the plugin or
/// would copy a directory into itself.
fn copy_plugin(root: &Path, from: &Path, to: &Path) -> Result<(), InstallError> {
    let canonical_root = root.canonicalize().map_err(io_err(root))?;
    copy_tree(&canonical_root, from, to, &mut Vec::new())
}

/// [`copy_plugin`] below `root` (canonical); `entered` holds the real
/// directories being copied, outermost first.
fn copy_tree(
    canonical_root: &Path,
    from: &Path,
    to: &Path,
    entered: &mut Vec<PathBuf>,
) -> Result<(), InstallError> {
    let root = canonical_root;
    std::fs::create_dir_all(to).map_err(io_err(to))?;
    entered.push(from.canonicalize().map_err(io_err(from))?);
    for entry in std::fs::read_dir(from).map_err(io_err(from))? {
        let entry = entry.map_err(io_err(from))?;
        let name = entry.file_name();
        if name == ".git" || name == "__pycache__" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        let meta = std::fs::symlink_metadata(&src).map_err(io_err(&src))?;
        let real = if meta.file_type().is_symlink() {
            let target = src.canonicalize().map_err(|_| {
                InstallError::NotAPlugin(
                    root.to_path_buf(),
                    format!("broken symlink {}", src.display()),
                )
            })?;
            if !target.starts_with(canonical_root) {
                return Err(InstallError::NotAPlugin(
                    root.to_path_buf(),
                    format!("symlink {} points outside the plugin", src.display()),
                ));
            }
            // A link to a directory being copied would be copied forever.
            if entered.contains(&target) {
                return Err(InstallError::NotAPlugin(
                    root.to_path_buf(),
                    format!(
                        "symlink {} points to a directory that contains it (a loop)",
                        src.display()
                    ),
                ));
            }
            target
        } else {
            src.clone()
        };
        let real_meta = std::fs::metadata(&real).map_err(io_err(&real))?;
        if real_meta.is_dir() {
            copy_tree(canonical_root, &real, &dst, entered)?;
        } else {
            copy_regular(&real, &dst)?;
        }
    }
    entered.pop();
    Ok(())
}

/// `git clone --depth 1`, showing git's progress on stderr as it comes and
/// naming the cause (network, authentication, missing repository) on failure.
fn git_clone(url: &str, into: &Path) -> Result<(), InstallError> {
    eprintln!("Cloning {url} ...");
    let mut child = Command::new("git")
        .args(["clone", "--depth", "1", "--progress", "--", url])
        .arg(into)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| InstallError::Clone {
            url: url.into(),
            kind: "git is not available",
            detail: format!("{e}; install git and try again"),
        })?;
    let mut stderr = child.stderr.take().expect("piped");
    let mut captured = Vec::new();
    let mut buf = [0u8; 4096];
    let mut out = std::io::stderr();
    loop {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let _ = out.write_all(&buf[..n]);
                captured.extend_from_slice(&buf[..n]);
            }
        }
    }
    let status = child.wait().map_err(|e| InstallError::Clone {
        url: url.into(),
        kind: "git failed",
        detail: e.to_string(),
    })?;
    if status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&captured);
    let detail = text
        .lines()
        .flat_map(|l| l.split('\r'))
        .map(str::trim)
        .find(|l| l.starts_with("fatal:") || l.starts_with("error:") || l.starts_with("ERROR"))
        .unwrap_or_else(|| text.lines().last().unwrap_or("git exited with an error"))
        .to_string();
    Err(InstallError::Clone {
        url: url.into(),
        kind: classify_git_error(&text),
        detail,
    })
}

fn classify_git_error(text: &str) -> &'static str {
    let t = text.to_lowercase();
    if [
        "could not resolve host",
        "network is unreachable",
        "connection refused",
        "timed out",
        "connection reset",
        "failed to connect",
    ]
    .iter()
    .any(|p| t.contains(p))
    {
        "network error"
    } else if [
        "authentication failed",
        "permission denied",
        "could not read username",
        "terminal prompts disabled",
        "access denied",
    ]
    .iter()
    .any(|p| t.contains(p))
    {
        "authentication failed"
    } else if [
        "not found",
        "does not appear to be a git repository",
        "does not exist",
        "no such",
    ]
    .iter()
    .any(|p| t.contains(p))
    {
        "repository not found"
    } else {
        "git failed"
    }
}

/// Delete the user plugin directory `dir`.
pub fn remove_dir(dir: &Path) -> Result<(), InstallError> {
    std::fs::remove_dir_all(dir).map_err(io_err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_forms() {
        assert_eq!(
            parse_source("owner/repo").unwrap(),
            PluginSource::Git {
                url: "https://github.com/owner/repo.git".into(),
                subpath: None
            }
        );
        assert_eq!(
            parse_source("owner/repo/plugins/x").unwrap(),
            PluginSource::Git {
                url: "https://github.com/owner/repo.git".into(),
                subpath: Some("plugins/x".into())
            }
        );
        assert_eq!(
            parse_source("https://example.com/r.git#sub/dir").unwrap(),
            PluginSource::Git {
                url: "https://example.com/r.git".into(),
                subpath: Some("sub/dir".into())
            }
        );
        assert_eq!(
            parse_source("git@example.com:o/r.git").unwrap(),
            PluginSource::Git {
                url: "git@example.com:o/r.git".into(),
                subpath: None
            }
        );
        assert!(parse_source("owner/repo/sub#frag").is_err());
        assert!(parse_source("justaword").is_err());
        assert!(parse_source("./definitely-not-here").is_err());
    }

    /// A plugin directory holding one file that says which version it is.
    fn plugin(at: &Path, version: &str) {
        std::fs::create_dir_all(at).unwrap();
        std::fs::write(at.join("version"), version).unwrap();
    }

    fn version(at: &Path) -> String {
        std::fs::read_to_string(at.join("version")).unwrap()
    }

    /// `std::fs::rename`, failing instead when moving `from` to `to`.
    fn rename_failing(
        fail: Vec<(PathBuf, PathBuf)>,
    ) -> impl Fn(&Path, &Path) -> std::io::Result<()> {
        move |from, to| {
            if fail.iter().any(|(f, t)| f == from && t == to) {
                return Err(std::io::Error::other("injected failure"));
            }
            std::fs::rename(from, to)
        }
    }

    #[test]
    fn a_forced_replace_swaps_the_new_copy_in() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target, previous) = (
            dir.path().join("staged"),
            dir.path().join("target"),
            dir.path().join("previous"),
        );
        plugin(&staged, "new");
        plugin(&target, "old");
        swap_into_place(&staged, &target, Some(&previous), rename_failing(vec![])).unwrap();
        assert_eq!(version(&target), "new");
        assert_eq!(version(&previous), "old");
        assert!(!staged.exists());
    }

    #[test]
    fn a_failed_forced_replace_puts_the_installed_plugin_back() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target, previous) = (
            dir.path().join("staged"),
            dir.path().join("target"),
            dir.path().join("previous"),
        );
        plugin(&staged, "new");
        plugin(&target, "old");
        let err = swap_into_place(
            &staged,
            &target,
            Some(&previous),
            rename_failing(vec![(staged.clone(), target.clone())]),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("injected failure"), "{message}");
        assert!(message.contains("left as it was"), "{message}");
        assert_eq!(version(&target), "old", "the installed plugin is back");
        assert!(!previous.exists());
        assert_eq!(version(&staged), "new");
    }

    #[test]
    fn an_old_plugin_that_cannot_be_put_back_is_named_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target, previous) = (
            dir.path().join("staged"),
            dir.path().join("target"),
            dir.path().join("previous"),
        );
        plugin(&staged, "new");
        plugin(&target, "old");
        let err = swap_into_place(
            &staged,
            &target,
            Some(&previous),
            rename_failing(vec![
                (staged.clone(), target.clone()),
                (previous.clone(), target.clone()),
            ]),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(&format!("kept at {}", previous.display())),
            "{message}"
        );
        assert_eq!(version(&previous), "old");
    }

    #[test]
    fn a_first_install_that_fails_leaves_no_target() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target) = (dir.path().join("staged"), dir.path().join("target"));
        plugin(&staged, "new");
        swap_into_place(
            &staged,
            &target,
            None,
            rename_failing(vec![(staged.clone(), target.clone())]),
        )
        .unwrap_err();
        assert!(!target.exists());
    }

    #[test]
    fn subpath_guards() {
        assert!(check_subpath("../x").is_err());
        assert!(check_subpath("a/../../x").is_err());
        assert!(check_subpath("/etc").is_err());
        assert!(check_subpath("plugins/x").is_ok());
    }
}
