//! Which Python a plugin runs on: the embedded one, or another CPython of
//! the machine its `requires-python` asks for; and how a worker is started
//! on a plugin's own environment.
//!
//! Interpreters are looked for on `PATH` (`python3`, `python3.N`) and under
//! pyenv (`$PYENV_ROOT/versions/*/bin/python3`, `~/.pyenv` by default).
//! The embedded interpreter wins when it satisfies `requires-python`;
//! otherwise the newest that does.
//!
//! A worker on an environment of the embedded version is this very program
//! with the environment's `site-packages` first on `PYTHONPATH`. On another
//! CPython the embedded interpreter cannot serve (libpython is linked in),
//! so the worker is the environment's own `python` running plughost's
//! stable-ABI wheel (`plughost._native`, cp310-abi3: any CPython from
//! 3.10), which `plugins install` puts in the environment
//! (docs/plugin-deps.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::supervisor::LoadSpec;
use super::WorkerCommand;
use crate::plugins::deps::{own, shared};

/// A CPython found on the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    /// `(major, minor, micro)`.
    pub version: (u32, u32, u32),
    /// The one plughost embeds (linked in).
    pub embedded: bool,
}

impl Found {
    pub fn version_text(&self) -> String {
        let (a, b, c) = self.version;
        format!("{a}.{b}.{c}")
    }
}

/// The version plughost embeds, `(major, minor)`.
pub fn embedded_version() -> Option<(u32, u32)> {
    let v = option_env!("PLUGHOST_BUILD_PYTHON_VERSION")?;
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The executable of the CPython plughost was built against (what the
/// shared environment is resolved for), when it is still there.
pub fn embedded_python() -> Option<PathBuf> {
    let p = PathBuf::from(option_env!("PLUGHOST_BUILD_PYTHON")?);
    crate::plugins::deps::uv::is_executable(&p).then_some(p)
}

/// The CPython plughost embeds, as found on disk (its executable, its
/// full version).
pub fn embedded() -> Option<Found> {
    let (exe, (a, b)) = (embedded_python()?, embedded_version()?);
    let version = version_of(&exe).unwrap_or((a, b, 0));
    Some(Found {
        path: exe,
        version,
        embedded: true,
    })
}

fn version_of(python: &Path) -> Option<(u32, u32, u32)> {
    let out = Command::new(python)
        .args([
            "-I",
            "-c",
            "import sys; print('%d.%d.%d' % sys.version_info[:3])",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Every CPython on `PATH` and under pyenv, newest first, each once.
pub fn candidates() -> Vec<Found> {
    let mut paths: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            paths.push(dir.join("python3"));
            for minor in 8..=20 {
                paths.push(dir.join(format!("python3.{minor}")));
            }
        }
    }
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(Ok(entries)) = pyenv.map(|p| std::fs::read_dir(p.join("versions"))) {
        for e in entries.flatten() {
            paths.push(e.path().join("bin").join("python3"));
        }
    }
    let embedded = embedded_python().and_then(|p| p.canonicalize().ok());
    let mut seen = Vec::new();
    let mut found = Vec::new();
    for p in paths {
        if !crate::plugins::deps::uv::is_executable(&p) {
            continue;
        }
        let Ok(real) = p.canonicalize() else { continue };
        if seen.contains(&real) {
            continue;
        }
        seen.push(real.clone());
        if let Some(version) = version_of(&p) {
            found.push(Found {
                embedded: embedded.as_ref() == Some(&real),
                path: p,
                version,
            });
        }
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.version));
    found.dedup_by(|a, b| a.version == b.version && !a.embedded);
    found
}

/// The interpreter for `requires_python`: the embedded one when it
/// satisfies it, else the newest found that does; the error lists what
/// was found.
pub fn choose(requires_python: Option<&str>) -> Result<Found, String> {
    let spec = requires_python.unwrap_or("").trim();
    if let Some(found) = embedded().filter(|f| satisfies(spec, f.version)) {
        return Ok(found);
    }
    let all = candidates();
    if let Some(f) = all.iter().find(|f| satisfies(spec, f.version)) {
        return Ok(f.clone());
    }
    let seen: Vec<String> = all.iter().map(Found::version_text).collect();
    Err(format!(
        "no CPython on this machine satisfies requires-python '{spec}' (looked on PATH and under pyenv; found: {})",
        if seen.is_empty() { "none".into() } else { seen.join(", ") }
    ))
}

/// Whether `version` satisfies the PEP 440 specifier set `spec` (`>=3.12,<4`;
/// `==3.12.*`; `~=3.11`); empty means any.
pub fn satisfies(spec: &str, version: (u32, u32, u32)) -> bool {
    let v = [version.0, version.1, version.2];
    spec.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .all(|clause| {
            let op_len = clause
                .find(|ch: char| ch.is_ascii_digit())
                .unwrap_or(clause.len());
            let (op, rest) = clause.split_at(op_len);
            let (wild, rest) = match rest.strip_suffix(".*") {
                Some(r) => (true, r),
                None => (false, rest),
            };
            let want: Vec<u32> = rest.split('.').filter_map(|p| p.parse().ok()).collect();
            let n = want.len().min(3);
            let mut padded = [0u32; 3];
            padded[..n].copy_from_slice(&want[..n]);
            let prefix_eq = v[..n] == want[..n];
            match op.trim() {
                "==" | "===" if wild => prefix_eq,
                "==" | "===" => v == padded,
                "!=" if wild => !prefix_eq,
                "!=" => v != padded,
                ">=" => v >= padded,
                ">" => v > padded,
                "<=" => v <= padded,
                "<" => v < padded,
                "~=" if n >= 2 => v >= padded && v[..n - 1] == want[..n - 1],
                _ => false,
            }
        })
}

/// The command that starts the worker of `load`: on the plugin's own
/// environment when it has one (see the module docs), with the shared
/// environment on `PYTHONPATH` otherwise (an isolated plugin's packages
/// installed while it ran in-process).
pub fn command(base: &WorkerCommand, load: &LoadSpec) -> Command {
    let mut cmd = command_for(base, load);
    // The `plughost` binary allocates with mimalloc, which reserves its
    // arenas a gigabyte at a time: under a worker's memory limit
    // (RLIMIT_DATA, set once the worker runs) the next reservation failed
    // and the plugin could not load. Smaller reservations fit the limit.
    if load.limits.memory_mb.is_some() && std::env::var_os("MIMALLOC_ARENA_RESERVE").is_none() {
        cmd.env("MIMALLOC_ARENA_RESERVE", "16MiB");
    }
    cmd
}

fn command_for(base: &WorkerCommand, load: &LoadSpec) -> Command {
    match own::find(&load.home, &load.key) {
        Some((dir, version)) if !same_minor(&version, embedded_version()) => {
            let wheel = WorkerCommand::python(dir.join("bin").join("python"));
            let mut cmd = Command::new(&wheel.program);
            cmd.args(&wheel.args)
                .env_remove("PYTHONPATH")
                .env_remove("PYTHONHOME");
            cmd
        }
        Some((dir, version)) => with_site(base, Some(own::site_packages(&dir, &version))),
        None => with_site(base, shared::site_dir(&load.home)),
    }
}

/// `base` with `site` first on `PYTHONPATH`.
fn with_site(base: &WorkerCommand, site: Option<PathBuf>) -> Command {
    let mut cmd = Command::new(&base.program);
    cmd.args(&base.args);
    if let Some(site) = site {
        let mut path = OsString::from(site.as_os_str());
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(old);
        }
        cmd.env("PYTHONPATH", path);
    }
    cmd
}

fn same_minor(version: &str, embedded: Option<(u32, u32)>) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let ours = (parts.next().flatten(), parts.next().flatten());
    matches!((ours, embedded), ((Some(a), Some(b)), Some((x, y))) if a == x && b == y)
}

/// What `plugins doctor` says of the worker of plugin `key`.
pub fn describe(home: &Path, key: &str) -> Option<String> {
    let (dir, version) = own::find(home, key)?;
    let how = if same_minor(&version, embedded_version()) {
        "plughost's own worker with its site-packages first on PYTHONPATH"
    } else {
        "its python running plughost's stable-ABI wheel"
    };
    Some(format!(
        "own environment {} (Python {version}; worker: {how})",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::satisfies;

    #[test]
    fn specifiers() {
        assert!(satisfies("", (3, 11, 7)));
        assert!(satisfies(">=3.12", (3, 12, 1)));
        assert!(!satisfies(">=3.12", (3, 11, 7)));
        assert!(satisfies(">=3.9, <3.12", (3, 11, 7)));
        assert!(satisfies("==3.12.*", (3, 12, 1)));
        assert!(!satisfies("==3.12.*", (3, 13, 0)));
        assert!(satisfies("~=3.11", (3, 13, 0)));
        assert!(!satisfies("~=3.11.2", (3, 12, 0)));
        assert!(satisfies("!=3.11.*", (3, 12, 0)));
    }
}
