//! The SOURCE argument: git URLs, `owner/repo[/sub]`, local paths; sub-paths kept inside.

use std::path::{Component, Path, PathBuf};

use super::{io_err, InstallError, PluginSource};

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
pub(super) fn check_subpath(subpath: &str) -> Result<(), InstallError> {
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
pub(super) fn resolve_inside(root: &Path, subpath: Option<&str>) -> Result<PathBuf, InstallError> {
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

    #[test]
    fn subpath_guards() {
        assert!(check_subpath("../x").is_err());
        assert!(check_subpath("a/../../x").is_err());
        assert!(check_subpath("/etc").is_err());
        assert!(check_subpath("plugins/x").is_ok());
    }
}
