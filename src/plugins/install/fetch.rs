//! Cloning a git source (`git clone --depth 1`) and naming why it failed.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use super::InstallError;

/// `git clone --depth 1`, showing git's progress on stderr as it comes and
/// naming the cause (network, authentication, missing repository) on failure.
pub(super) fn git_clone(url: &str, into: &Path) -> Result<(), InstallError> {
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

/// Clone `url` whole (no checkout) and check out `rev` (a commit, branch or
/// tag), detached; the commit it resolved to. A `rev` the repository does
/// not have is [`InstallError::BadRef`], naming it.
pub(super) fn git_clone_at(url: &str, rev: &str, into: &Path) -> Result<String, InstallError> {
    if rev.trim().is_empty() || rev.starts_with('-') {
        return Err(InstallError::BadRef {
            rev: rev.into(),
            url: url.into(),
            detail: "not a revision".into(),
        });
    }
    eprintln!("Cloning {url} at {rev} ...");
    let status = Command::new("git")
        .args(["clone", "--no-checkout", "--quiet", "--", url])
        .arg(into)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| InstallError::Clone {
            url: url.into(),
            kind: "git is not available",
            detail: format!("{e}; install git and try again"),
        })?;
    if !status.status.success() {
        let text = String::from_utf8_lossy(&status.stderr).into_owned();
        return Err(InstallError::Clone {
            url: url.into(),
            kind: classify_git_error(&text),
            detail: text.trim().lines().last().unwrap_or("git failed").into(),
        });
    }
    let commit = git_in(
        into,
        &["rev-parse", "--verify", "--quiet", "--end-of-options"],
        &format!("{rev}^{{commit}}"),
    )
    .or_else(|_| {
        // A branch of the remote that is not the default one.
        git_in(
            into,
            &["rev-parse", "--verify", "--quiet", "--end-of-options"],
            &format!("origin/{rev}^{{commit}}"),
        )
    })
    .map_err(|_| InstallError::BadRef {
        rev: rev.into(),
        url: url.into(),
        detail: "no such commit, branch or tag in the repository".into(),
    })?;
    git_in(into, &["checkout", "--quiet", "--detach"], &commit).map_err(|detail| {
        InstallError::BadRef {
            rev: rev.into(),
            url: url.into(),
            detail,
        }
    })?;
    Ok(commit)
}

/// The commit checked out in the clone at `dir`.
pub(super) fn head_commit(dir: &Path) -> Option<String> {
    git_in(dir, &["rev-parse", "--verify", "--quiet"], "HEAD").ok()
}

/// The top of the git work tree holding `dir`, if it is in one.
pub(super) fn work_tree_top(dir: &Path) -> Option<std::path::PathBuf> {
    git_in(dir, &["rev-parse"], "--show-toplevel")
        .ok()
        .map(std::path::PathBuf::from)
}

/// `git -C dir ARGS LAST`: its first line of output, or its error text.
fn git_in(dir: &Path, args: &[&str], last: &str) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .arg(last)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
