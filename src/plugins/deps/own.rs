//! A plugin's own environment, `<home>/envs/plugins/<name>`: a virtualenv
//! (`uv venv`) on the CPython chosen for it, holding its requirements only.
//! A plugin that has one always runs isolated, in a worker on that
//! environment (see `isolation::interpreter`): its packages never meet
//! another plugin's.
//!
//! A new environment is built beside the one in use and renamed into place
//! only once uv finished, so a failed resolution leaves the old one intact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::uv::Uv;
use super::{io, DepsError, Requirements};
use crate::plugins::config::Isolation;

/// `<home>/envs/plugins`.
fn root(home: &Path) -> PathBuf {
    super::envs_dir(home).join("plugins")
}

/// `<home>/envs/plugins/<name>`.
pub fn env_dir(home: &Path, name: &str) -> PathBuf {
    root(home).join(name)
}

/// Plugin `name`'s own environment, when it has one: its directory and
/// the Python version it runs (`pyvenv.cfg`'s `version_info`, `3.12.1`).
pub fn find(home: &Path, name: &str) -> Option<(PathBuf, String)> {
    let dir = env_dir(home, name);
    let cfg = std::fs::read_to_string(dir.join("pyvenv.cfg")).ok()?;
    let version = cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        matches!(k.trim(), "version_info" | "version").then(|| v.trim().to_string())
    })?;
    Some((dir, version))
}

/// The names of the plugins that have their own environment.
pub fn names(home: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root(home)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && find(home, n).is_some())
        .collect();
    names.sort();
    names
}

/// `isolation` with every plugin that has its own environment added: such a
/// plugin can only run in a worker on it (its packages are nowhere else).
pub fn isolate_own_envs(isolation: Isolation, home: &Path) -> Isolation {
    let own = names(home);
    match isolation {
        Isolation::All => Isolation::All,
        _ if own.is_empty() => isolation,
        Isolation::None => Isolation::Only(own),
        Isolation::Only(mut keys) => {
            for k in own {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            Isolation::Only(keys)
        }
    }
}

/// `site-packages` of the virtualenv `dir` for Python `version` (`3.12.1`).
pub fn site_packages(dir: &Path, version: &str) -> PathBuf {
    let minor: Vec<&str> = version.split('.').take(2).collect();
    dir.join("lib")
        .join(format!("python{}", minor.join(".")))
        .join("site-packages")
}

/// What else a worker on the environment needs installed beside the
/// plugin's requirements (the plughost wheel for a CPython other than the
/// embedded one), and where uv finds it.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    pub requirements: Vec<String>,
    pub find_links: Vec<PathBuf>,
    /// Packages taken only as wheels (`--only-binary`): plughost's, which
    /// an index's source distribution would try to build with Rust.
    pub only_binary: Vec<String>,
}

/// Build plugin `name`'s environment on `python` with `requirements` (and
/// `extra`), replacing its old one only once uv succeeded; what it holds,
/// `name → version`.
pub fn build(
    home: &Path,
    uv: &Uv,
    name: &str,
    requirements: &Requirements,
    python: &Path,
    extra: &Extra,
    constraints: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, DepsError> {
    let root = root(home);
    std::fs::create_dir_all(&root).map_err(io(root.display().to_string()))?;
    let _held =
        crate::plugins::atomic::lock(&root, ".lock").map_err(io(root.display().to_string()))?;
    let scratch = tempfile::Builder::new()
        .prefix(&format!(".{name}-"))
        .tempdir_in(&root)
        .map_err(io(root.display().to_string()))?;
    let venv = scratch.path().join("env");
    let mut cmd = uv.command(["venv", "--quiet", "--relocatable", "--python"]);
    cmd.arg(python).arg(&venv);
    uv.run(
        cmd,
        &format!("uv cannot make an environment for plugin '{name}'"),
    )?;
    let venv_python = venv.join("bin").join("python");
    let reqs: Vec<&String> = requirements
        .requires
        .iter()
        .chain(&extra.requirements)
        .collect();
    if !reqs.is_empty() {
        let file = scratch.path().join("requirements.txt");
        let text: String = reqs.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(&file, text).map_err(io(file.display().to_string()))?;
        let mut cmd = uv.command(["pip", "install", "--python"]);
        cmd.arg(&venv_python).arg("-r").arg(&file);
        for dir in &extra.find_links {
            cmd.arg("--find-links").arg(dir);
        }
        for package in &extra.only_binary {
            cmd.arg("--only-binary").arg(package);
        }
        if !constraints.is_empty() {
            let c = scratch.path().join("constraints.txt");
            let text: String = constraints
                .iter()
                .map(|(n, v)| format!("{n}=={v}\n"))
                .collect();
            std::fs::write(&c, text).map_err(io(c.display().to_string()))?;
            cmd.arg("-c").arg(&c);
        }
        uv.run_showing(
            cmd,
            &format!("uv cannot install the requirements of plugin '{name}' in its own environment (the one in use, if any, is left as it was)"),
            &format!("installing the requirements of plugin '{name}' in its own environment (uv):"),
        )?;
    }
    let versions = uv.freeze(&venv_python, None)?;
    let target = env_dir(home, name);
    let old = scratch.path().join("old");
    let had = target.exists();
    if had {
        std::fs::rename(&target, &old).map_err(io(target.display().to_string()))?;
    }
    if let Err(e) = std::fs::rename(&venv, &target) {
        if had {
            let _ = std::fs::rename(&old, &target);
        }
        return Err(io(target.display().to_string())(e));
    }
    Ok(versions)
}

/// Delete plugin `name`'s own environment (after `plugins remove`).
pub fn remove(home: &Path, name: &str) {
    let _ = std::fs::remove_dir_all(env_dir(home, name));
}

/// Where a worker on CPython `a.b` (not the embedded one) gets plughost:
/// its environment must hold plughost's wheel for that Python, of this
/// very version (the worker protocol is not versioned across releases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerWheel {
    /// A wheel file found here (see [`plughost_wheel`]).
    Local(PathBuf),
    /// None here: `plughost==<this version>` from the package index uv
    /// is set to use, as any requirement of the plugin is.
    Index(String),
}

impl WorkerWheel {
    /// The requirement uv installs.
    pub fn requirement(&self) -> String {
        match self {
            WorkerWheel::Local(path) => path.display().to_string(),
            WorkerWheel::Index(requirement) => requirement.clone(),
        }
    }
}

/// The plughost wheel a worker on CPython `a.b` (not the embedded one)
/// installs in its environment: the stable-ABI wheel (`cp3N-abi3`, any
/// `N <= b`: one wheel for every CPython from 3.10, issue 47) or one built
/// for exactly `a.b` (`cp3b`). Looked for in the directories of
/// `PLUGHOST_WHEELS` (separated by `:`), `<home>/wheels`, and `wheels`
/// beside the running program (where a release puts the wheel it ships);
/// with none there, plughost of the same version from the package index,
/// so a user of the bare binary (`cargo install`) builds nothing.
pub fn plughost_wheel(home: &Path, a: u32, b: u32) -> WorkerWheel {
    let found = wheel_dirs(home)
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten())
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".whl") && wheel_fits(&name, a, b)
        });
    match found {
        Some(path) => WorkerWheel::Local(path),
        None => WorkerWheel::Index(format!("plughost=={}", env!("CARGO_PKG_VERSION"))),
    }
}

/// Where [`plughost_wheel`] looks, in order.
fn wheel_dirs(home: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PLUGHOST_WHEELS")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.push(home.join("wheels"));
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("wheels")))
    {
        dirs.push(beside);
    }
    dirs
}

/// Whether uv can get `requirement` (plughost, as a wheel) for `python`
/// from the package index it is set to use.
pub fn index_has(uv: &Uv, python: &Path, requirement: &str) -> bool {
    let Ok(dir) = tempfile::tempdir() else {
        return false;
    };
    let file = dir.path().join("plughost.in");
    if std::fs::write(&file, format!("{requirement}\n")).is_err() {
        return false;
    }
    let mut cmd = uv.command([
        "pip",
        "compile",
        "--quiet",
        "--only-binary",
        "plughost",
        "--python",
    ]);
    cmd.arg(python).arg(&file);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.status().is_ok_and(|s| s.success())
}

/// What to do when uv found no plughost for a worker on CPython `a.b` on
/// the package index either.
pub fn missing_wheel_hint(home: &Path, a: u32, b: u32) -> String {
    let wheels = home.join("wheels");
    let version = env!("CARGO_PKG_VERSION");
    format!(
        "a worker on Python {a}.{b} runs plughost {version}'s wheel for that Python (the stable-ABI one serves every CPython from 3.10). None was found in PLUGHOST_WHEELS, {} or beside this program, and uv could not install plughost=={version} from the package index. Put the wheel in {}: `pip download plughost=={version} --only-binary=:all: --python-version {a}.{b} --no-deps -d {}` where an index has it; from plughost's source tree, `maturin build --release --features abi3 --out {}`. Then install again",
        wheels.display(),
        wheels.display(),
        wheels.display(),
        wheels.display()
    )
}

/// Whether wheel file `name` is plughost of this version and imports on
/// CPython `a.b`: its Python tag is `cp{a}{b}`, or `cp{a}N` with the
/// `abi3` ABI tag and `N <= b`. Another version's wheel (left in
/// `<home>/wheels` by an earlier install) would run a worker this host
/// cannot talk to.
fn wheel_fits(name: &str, a: u32, b: u32) -> bool {
    // name-version[-build]-pytag-abitag-platform.whl
    let parts: Vec<&str> = name.trim_end_matches(".whl").split('-').collect();
    let [distribution, version, .., py, abi, _platform] = parts.as_slice() else {
        return false;
    };
    if *distribution != "plughost" || *version != wheel_version(env!("CARGO_PKG_VERSION")) {
        return false;
    }
    let Some(minor) = py
        .strip_prefix(&format!("cp{a}"))
        .and_then(|m| m.parse::<u32>().ok())
    else {
        return false;
    };
    minor == b || (*abi == "abi3" && minor <= b)
}

/// Cargo's version `cargo` as a wheel's file name spells it (PEP 440, as
/// maturin writes it): `0.2.0-rc.1` is `0.2.0rc1`, `1.0.0-alpha.2` is
/// `1.0.0a2`.
fn wheel_version(cargo: &str) -> String {
    let cargo = cargo.split('+').next().unwrap_or(cargo);
    let Some((release, pre)) = cargo.split_once('-') else {
        return cargo.to_string();
    };
    let pre = pre
        .replace("alpha", "a")
        .replace("beta", "b")
        .replace('.', "");
    format!("{release}{pre}")
}

#[cfg(test)]
mod wheel_tests {
    use super::{wheel_fits, wheel_version};

    #[test]
    fn a_wheel_with_a_build_tag_fits_and_versions_are_spelt_as_pep_440() {
        let v = env!("CARGO_PKG_VERSION");
        let tagged = format!("plughost-{v}-1-cp310-abi3-manylinux_2_34_x86_64.whl");
        assert!(wheel_fits(&tagged, 3, 12));
        assert_eq!(wheel_version("0.1.0"), "0.1.0");
        assert_eq!(wheel_version("0.2.0-rc.1"), "0.2.0rc1");
        assert_eq!(wheel_version("1.0.0-alpha.2"), "1.0.0a2");
        assert_eq!(wheel_version("1.0.0-beta.3+build.5"), "1.0.0b3");
    }

    /// The wheel's file name takes its version from `pyproject.toml`, the
    /// worker and [`wheel_fits`] from Cargo's: they must agree.
    #[test]
    fn the_wheel_and_the_crate_have_one_version() {
        let pyproject = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/pyproject.toml"));
        let declared = pyproject
            .lines()
            .find_map(|l| l.trim().strip_prefix("version = "))
            .map(|v| v.trim_matches('"'));
        assert_eq!(
            declared,
            Some(wheel_version(env!("CARGO_PKG_VERSION")).as_str())
        );
    }

    #[test]
    fn the_stable_abi_wheel_fits_every_later_cpython() {
        let v = env!("CARGO_PKG_VERSION");
        let abi3 = &format!("plughost-{v}-cp310-abi3-manylinux_2_34_x86_64.whl");
        assert!(wheel_fits(abi3, 3, 12) && wheel_fits(abi3, 3, 13) && wheel_fits(abi3, 3, 10));
        assert!(!wheel_fits(abi3, 3, 9));
        let cp312 = &format!("plughost-{v}-cp312-cp312-manylinux_2_34_x86_64.whl");
        assert!(wheel_fits(cp312, 3, 12) && !wheel_fits(cp312, 3, 13));
    }

    #[test]
    fn only_this_versions_wheel_fits() {
        let ours = format!(
            "plughost-{}-cp310-abi3-manylinux_2_34_x86_64.whl",
            env!("CARGO_PKG_VERSION")
        );
        assert!(wheel_fits(&ours, 3, 12));
        let older = "plughost-0.0.1-cp310-abi3-manylinux_2_34_x86_64.whl";
        assert!(!wheel_fits(older, 3, 12), "another version's wheel");
        let other = format!(
            "plughostx-{}-cp310-abi3-manylinux_2_34_x86_64.whl",
            env!("CARGO_PKG_VERSION")
        );
        assert!(!wheel_fits(&other, 3, 12), "another distribution");
    }
}
