//! What a confined plugin may touch: the defaults of issue 50 plus the
//! plugin's `plugins.entries.<key>.sandbox` rules.
//!
//! Read (and execute): the system (`/usr`, `/etc`, `/bin`, `/lib*`,
//! `/opt`, `/proc`, `/sys`, a few device files), the interpreter (the
//! CPython plughost embeds, the active virtualenv, `PYTHONPATH`,
//! `PYTHONHOME`, the user's site-packages), the worker program, plughost's
//! bytecode cache, the plugin's own directory and environment, and every
//! write path. Write: its data directories (`<home>/<key>`, as Flowly
//! plugins use, and `<home>/plugin-data/<key>`), the workspace
//! (`<home>/workspace`), `/dev/shm`, its dialect's home (a plugin API whose plugins
//! keep their state in a home of their own, `plugins::config::dialect_home`) and the temp
//! directories (`TMPDIR`, else `/tmp`; and `/var/tmp`). Nothing else: the user's home,
//! plughost's `config.json` and keys, other plugins' directories.

use std::path::{Path, PathBuf};

use crate::isolation::supervisor::LoadSpec;
use crate::plugins::config::{read_sandbox, NetworkRule, SandboxSetting};

/// The confinement of one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub key: String,
    /// Readable (and executable) trees.
    pub read: Vec<PathBuf>,
    /// Writable trees (readable too).
    pub write: Vec<PathBuf>,
    /// Device files opened for reading and writing.
    pub devices: Vec<PathBuf>,
    /// The read paths the plugin's settings added (shown by doctor).
    pub extra_read: Vec<PathBuf>,
    pub network: NetworkRule,
    pub memory_mb: Option<u64>,
    /// It may open Unix sockets (`unix_sockets: true`).
    pub unix_sockets: bool,
}

/// System trees every confined worker reads.
const SYSTEM: &[&str] = &[
    "/usr",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
    "/dev/pts",
];

/// Device files read and written (never the disks: `/dev` as a whole is
/// not readable).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// Names under plughost's home that are its own, never a plugin's data
/// directory.
const RESERVED: &[&str] = &[
    "plugins",
    "workspace",
    "config.json",
    "plugin-data",
    "sessions",
    "keys",
    "secrets",
    "env",
    "envs",
    "lock",
    "journal",
    "cache",
    ".cache",
];

/// The policy of the worker of `load` (started as `program`), or `None`
/// when its sandbox is off. Creates the plugin's data directories.
pub fn policy_for(load: &LoadSpec, program: &Path) -> Result<Option<Policy>, String> {
    build(load, program, true)
}

/// The policy a worker of `load` would run under, creating nothing (the
/// install summary).
pub fn preview(load: &LoadSpec) -> Result<Option<Policy>, String> {
    let program = std::env::current_exe().unwrap_or_default();
    build(load, &program, false)
}

fn build(load: &LoadSpec, program: &Path, create: bool) -> Result<Option<Policy>, String> {
    let rules = match read_sandbox(&load.home, &load.key).map_err(|e| e.to_string())? {
        SandboxSetting::Off => return Ok(None),
        SandboxSetting::On(rules) => rules,
    };
    let mut read: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
    read.extend(interpreter_paths(program));
    read.push(load.dir.clone());
    if let Some(cache) = bytecode_cache() {
        read.push(cache);
    }
    if let Some((env, _)) = crate::plugins::deps::own::find(&load.home, &load.key) {
        read.push(env);
    }
    if let Some(site) = crate::plugins::deps::shared::site_dir(&load.home) {
        read.push(site);
    }
    if create {
        if let Some(isolated) =
            crate::dialects::by_name(&load.dialect).and_then(|d| d.abilities().isolated)
        {
            read.extend(isolated.worker_reads(&load.home));
        }
    }
    let mut write = data_dirs(&load.home, &load.key);
    write.push(load.home.join("workspace"));
    write.push(std::env::temp_dir());
    // The other temp directory programs use (SQLite puts its temporary
    // files there before /tmp; it checks with access(2), which Landlock
    // does not answer, so it would fail to open them).
    write.push(PathBuf::from("/var/tmp"));
    // POSIX shared memory and semaphores (multiprocessing, browsers).
    write.push(PathBuf::from("/dev/shm"));
    write.extend(crate::plugins::config::dialect_home(&load.dialect));
    for dir in write.iter().filter(|_| create) {
        // So the plugin finds them (it could not create them: their
        // parents are not writable).
        let _ = std::fs::create_dir_all(dir);
    }
    write.extend(rules.write.iter().cloned());
    read.extend(rules.read.iter().cloned());
    dedup(&mut read);
    dedup(&mut write);
    Ok(Some(Policy {
        key: load.key.clone(),
        read,
        write,
        devices: DEVICES.iter().map(PathBuf::from).collect(),
        extra_read: rules.read,
        network: rules.network,
        memory_mb: rules.memory_mb,
        unix_sockets: rules.unix_sockets,
    }))
}

/// Where plugin `key` keeps its data: `<home>/<key>` (Flowly's and
/// other dialects' plugins write there) unless that name is plughost's own, and
/// `<home>/plugin-data/<key>` (a bundle's `${PLUGIN_DATA}`).
pub fn data_dirs(home: &Path, key: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let plain = !key.is_empty()
        && !key.starts_with('.')
        && !key.contains(['/', '\\'])
        && !RESERVED.contains(&key);
    if plain {
        dirs.push(home.join(key));
    }
    dirs.push(home.join("plugin-data").join(key));
    dirs
}

/// The interpreter's trees: the embedded CPython's prefix, the worker
/// program (and, for a Python worker, its prefix), the active virtualenv,
/// `PYTHONHOME`, each `PYTHONPATH` entry, the user's site-packages.
fn interpreter_paths(program: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let prefix_of = |exe: &Path| -> Option<PathBuf> {
        let real = exe.canonicalize().ok()?;
        Some(real.parent()?.parent()?.to_path_buf())
    };
    if let Some(exe) = crate::isolation::interpreter::embedded_python() {
        out.extend(prefix_of(&exe));
        // A virtualenv's python links to the base one: its own prefix
        // holds `pyvenv.cfg` and its site-packages.
        out.extend(exe.parent().and_then(Path::parent).map(Path::to_path_buf));
    }
    out.push(program.to_path_buf());
    if let Ok(real) = program.canonicalize() {
        if real
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"))
        {
            out.extend(prefix_of(&real));
            out.extend(
                program
                    .parent()
                    .and_then(Path::parent)
                    .map(Path::to_path_buf),
            );
        }
        out.extend(installation(&real));
        out.push(real);
    }
    // An embedded interpreter takes the `python3` first on `PATH` for its
    // executable, and `site` reads the `pyvenv.cfg` beside it: that
    // virtualenv is the interpreter's environment.
    if let Some(path) = std::env::var_os("PATH") {
        let venv = std::env::split_paths(&path)
            .find(|d| d.join("python3").is_file())
            .and_then(|d| d.parent().map(Path::to_path_buf))
            .filter(|root| root.join("pyvenv.cfg").is_file());
        out.extend(venv);
    }
    for var in ["VIRTUAL_ENV", "PYTHONHOME"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            out.push(PathBuf::from(v));
        }
    }
    if let Some(path) = std::env::var_os("PYTHONPATH") {
        out.extend(std::env::split_paths(&path).filter(|p| p.is_absolute()));
    }
    if let (Some(home), Some((a, b))) = (
        std::env::var_os("HOME"),
        crate::isolation::interpreter::embedded_version(),
    ) {
        out.push(PathBuf::from(home).join(format!(".local/lib/python{a}.{b}")));
    }
    out
}

/// The installation a program in a `bin` directory belongs to (a Node or
/// Python under `/opt/node`, `~/.nvm/versions/node/v20`: its libraries
/// beside `bin`), never `/`, the user's home or a directory directly in
/// it (`~/.local`, `~/.cargo` hold more than programs).
fn installation(program: &Path) -> Option<PathBuf> {
    let bin = program.parent()?;
    if bin.file_name()? != "bin" {
        return None;
    }
    let prefix = bin.parent()?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let too_wide = prefix.parent().is_none()
        || home
            .as_deref()
            .is_some_and(|h| prefix == h || prefix.parent() == Some(h));
    (!too_wide).then(|| prefix.to_path_buf())
}

/// plughost's bytecode cache of its embedded modules (read only).
fn bytecode_cache() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(cache.join("plughost"))
}

fn dedup(paths: &mut Vec<PathBuf>) {
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_never_names_plughosts_own_files() {
        let home = Path::new("/h");
        assert_eq!(
            data_dirs(home, "notes"),
            [
                PathBuf::from("/h/notes"),
                PathBuf::from("/h/plugin-data/notes")
            ]
        );
        for own in ["plugins", "config.json", "workspace", ".ssh", "a/b"] {
            assert!(!data_dirs(home, own).contains(&home.join(own)), "{own}");
        }
    }

    #[test]
    fn a_programs_installation_is_readable_but_never_the_home() {
        assert_eq!(
            installation(Path::new("/opt/node/bin/node")),
            Some(PathBuf::from("/opt/node"))
        );
        assert_eq!(installation(Path::new("/bin/sh")), None);
        assert_eq!(installation(Path::new("/opt/node/lib/x")), None);
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
            assert_eq!(installation(&home.join(".cargo/bin/tool")), None);
            assert_eq!(installation(&home.join("bin/tool")), None);
            assert_eq!(
                installation(&home.join(".nvm/versions/node/v20/bin/node")),
                Some(home.join(".nvm/versions/node/v20"))
            );
        }
    }
}
