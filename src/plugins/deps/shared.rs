//! The shared plugin environment, `<home>/envs/shared`: one directory of
//! packages (`uv pip install --target`) that the embedded interpreter puts
//! on `sys.path` before its own site-packages when a host starts, resolved
//! by uv from the requirements of every in-process plugin together.
//!
//! `envs/shared` is a symbolic link to one build, `envs/.shared-<id>`.
//! A change builds a whole new environment beside the one in use, and only
//! a build uv finished is linked in (a rename of a new link over the old:
//! atomic), so a refused or failed resolution leaves the environment in use
//! exactly as it was; the old build is deleted after the swap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::uv::Uv;
use super::{io, DepsError, Requirements};

/// One plugin of the shared environment.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub requirements: Requirements,
}

/// `<home>/envs/shared` (the link to the build in use).
pub fn link(home: &Path) -> PathBuf {
    super::envs_dir(home).join("shared")
}

/// The directory to put on `sys.path`, when a shared environment exists.
pub fn site_dir(home: &Path) -> Option<PathBuf> {
    let site = link(home).join("site-packages");
    site.is_dir().then_some(site)
}

/// What a sync did.
#[derive(Debug, Default)]
pub struct Synced {
    /// Every package of the environment, `name → version` (`uv pip freeze`).
    pub versions: BTreeMap<String, String>,
}

fn requirements_text(members: &[Member]) -> String {
    let mut text = String::new();
    for m in members.iter().filter(|m| !m.requirements.is_empty()) {
        text.push_str(&format!("# plugin {}\n", m.name));
        for r in &m.requirements.requires {
            text.push_str(r);
            text.push('\n');
        }
    }
    text
}

/// Resolve and install every member's requirements for `python` (the
/// interpreter plughost embeds) into a new build, then link it in.
/// `constraints` (`name → version`, from a lock file) pin what they name.
/// When uv refuses, the plugins conflicting with `newcomer` (or with each
/// other) are named, found by asking uv pair by pair.
pub fn sync(
    home: &Path,
    uv: &Uv,
    python: &Path,
    members: &[Member],
    newcomer: Option<&str>,
    constraints: &BTreeMap<String, String>,
) -> Result<Synced, DepsError> {
    let envs = super::envs_dir(home);
    std::fs::create_dir_all(&envs).map_err(io(envs.display().to_string()))?;
    // One change of the environments at a time (two installs at once).
    let _held =
        crate::plugins::atomic::lock(&envs, ".lock").map_err(io(envs.display().to_string()))?;
    sweep(&envs);
    if members.iter().all(|m| m.requirements.is_empty()) {
        remove_link(home)?;
        return Ok(Synced::default());
    }
    let build = tempfile::Builder::new()
        .prefix(&format!(".shared-{}-", std::process::id()))
        .tempdir_in(&envs)
        .map_err(io(envs.display().to_string()))?;
    let requirements = build.path().join("requirements.txt");
    std::fs::write(&requirements, requirements_text(members))
        .map_err(io(requirements.display().to_string()))?;
    let site = build.path().join("site-packages");
    let mut cmd = uv.command(["pip", "install", "--python"]);
    cmd.arg(python)
        .arg("--target")
        .arg(&site)
        .arg("-r")
        .arg(&requirements);
    if !constraints.is_empty() {
        let file = build.path().join("constraints.txt");
        let text: String = constraints
            .iter()
            .map(|(n, v)| format!("{n}=={v}\n"))
            .collect();
        std::fs::write(&file, text).map_err(io(file.display().to_string()))?;
        cmd.arg("-c").arg(&file);
    }
    if let Err(e) = uv.run_showing(
        cmd,
        "uv cannot install the plugins' requirements together in the shared environment (it is left as it was)",
        "installing the plugins' requirements in the shared environment (uv):",
    ) {
        return Err(name_conflicts(e, uv, python, members, newcomer, build.path()));
    }
    let versions = uv.freeze(python, Some(&site))?;
    let mut frozen: String = versions
        .iter()
        .map(|(n, v)| format!("{n}=={v}\n"))
        .collect();
    frozen.insert_str(0, "# what uv installed (uv pip freeze)\n");
    let _ = std::fs::write(build.path().join("freeze.txt"), frozen);
    let kept = build.keep();
    swap_link(home, &kept)?;
    Ok(Synced { versions })
}

/// Name the plugins whose requirements conflict (uv asked pairwise).
fn name_conflicts(
    error: DepsError,
    uv: &Uv,
    python: &Path,
    members: &[Member],
    newcomer: Option<&str>,
    scratch: &Path,
) -> DepsError {
    let DepsError::Unresolvable { what, detail, .. } = error else {
        return error;
    };
    let with_deps: Vec<&Member> = members
        .iter()
        .filter(|m| !m.requirements.is_empty())
        .collect();
    let mut pairs = Vec::new();
    for (i, a) in with_deps.iter().enumerate() {
        for b in &with_deps[i + 1..] {
            if newcomer.is_some_and(|n| a.name != n && b.name != n) {
                continue;
            }
            let file = scratch.join(format!("pair-{i}.txt"));
            let text = requirements_text(&[(*a).clone(), (*b).clone()]);
            if std::fs::write(&file, text).is_ok() && !uv.resolves(python, &file) {
                pairs.push((a, b));
            }
        }
    }
    let mut conflicting = Vec::new();
    let mut what = what;
    for (a, b) in &pairs {
        what.push_str(&format!(
            "\n  plugin '{}' requires {} and plugin '{}' requires {}",
            a.name,
            a.requirements.requires.join(", "),
            b.name,
            b.requirements.requires.join(", ")
        ));
        for n in [&a.name, &b.name] {
            if !conflicting.contains(n) {
                conflicting.push(n.clone());
            }
        }
    }
    DepsError::Unresolvable {
        what,
        detail,
        conflicting,
    }
}

/// Point `envs/shared` at `build` (a rename of a new link over the old),
/// then delete the build it pointed at before.
fn swap_link(home: &Path, build: &Path) -> Result<(), DepsError> {
    let link = link(home);
    let previous = std::fs::read_link(&link).ok();
    let name = build.file_name().expect("a build has a name");
    let tmp = link.with_file_name(format!(".shared-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp).map_err(io(tmp.display().to_string()))?;
    std::fs::rename(&tmp, &link).map_err(io(link.display().to_string()))?;
    if let Some(old) = previous.filter(|p| p.as_os_str() != name) {
        let _ = std::fs::remove_dir_all(link.with_file_name(old));
    }
    Ok(())
}

fn remove_link(home: &Path) -> Result<(), DepsError> {
    let link = link(home);
    let Ok(previous) = std::fs::read_link(&link) else {
        return Ok(());
    };
    std::fs::remove_file(&link).map_err(io(link.display().to_string()))?;
    let _ = std::fs::remove_dir_all(link.with_file_name(previous));
    Ok(())
}

/// Builds an interrupted sync left behind (not linked, owner gone).
fn sweep(envs: &Path) {
    let linked = std::fs::read_link(envs.join("shared")).ok();
    let Ok(entries) = std::fs::read_dir(envs) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(".shared-") else {
            continue;
        };
        if linked.as_deref() == Some(Path::new(&name)) {
            continue;
        }
        let pid = rest.split('-').next().and_then(|p| p.parse::<i32>().ok());
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let alive = pid.is_some_and(|p| unsafe { libc::kill(p, 0) } == 0);
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
