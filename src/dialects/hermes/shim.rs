//! The `hermes` command, as processes Hermes plugins start find it on
//! their `PATH` when no real Hermes is installed: plugins shell out to
//! `hermes <their CLI command> …` (a `register_cli_command` command) and to
//! `hermes plugins …`. The shim maps those onto plughost (`plughost hermes
//! <name> …`, `plughost plugins …`, with the same home), answers
//! `--version`, and refuses Hermes's other subcommands (`chat`, `gateway`,
//! `kanban`, `config`, …) with exit status 2 and a message saying plughost
//! does not provide them.

use std::path::{Path, PathBuf};

use pyo3::prelude::*;

/// Hermes's own subcommands plughost has no equivalent of.
const NOT_PROVIDED: &[&str] = &[
    "chat",
    "gateway",
    "setup",
    "model",
    "config",
    "kanban",
    "cron",
    "doctor",
    "tools",
    "skills",
    "sessions",
    "update",
    "login",
    "logout",
    "status",
    "profile",
    "profiles",
    "memory",
    "mcp",
    "acp",
    "dashboard",
    "insights",
    "honcho",
    "claw",
    "auth",
    "uninstall",
    "backup",
    "import",
    "webhook",
    "pairing",
    "whatsapp",
    "completion",
    "debug",
    "dump",
    "logs",
    "version-check",
];

/// The shim's text for plughost's executable `plughost` and `home`.
fn script(plughost: &str, home: &Path) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let refused = NOT_PROVIDED.join("|");
    format!(
        r#"#!/bin/sh
# hermes, as plughost provides it to processes Hermes plugins start.
PLUGHOST={plughost}
PLUGHOST_HOME_DIR={home}
case "$1" in
  ""|-h|--help|help)
    echo "hermes (plughost): 'hermes NAME ARGS' runs a plugin's CLI command (plughost hermes NAME); 'hermes plugins ...' is plughost plugins ...; Hermes's other subcommands are not provided."
    exit 0 ;;
  --version|-V|version)
    echo "hermes (provided by plughost)"
    exit 0 ;;
  plugins)
    shift
    exec "$PLUGHOST" --home "$PLUGHOST_HOME_DIR" plugins "$@" ;;
  {refused})
    echo "hermes $1: not provided by plughost (it runs Hermes plugins without Hermes): only a plugin's CLI command (hermes NAME ...) and 'hermes plugins ...' are" >&2
    exit 2 ;;
  *)
    exec "$PLUGHOST" --home "$PLUGHOST_HOME_DIR" hermes "$@" ;;
esac
"#,
        plughost = quote(plughost),
        home = quote(&home.to_string_lossy()),
    )
}

/// plughost's executable as a child can start it: this process when it is
/// plughost, else (the wheel, inside a Python application) `plughost` on
/// `PATH`.
fn plughost_executable() -> String {
    std::env::current_exe()
        .ok()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("plughost"))
        })
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plughost".into())
}

/// Where [`install`] puts the shim under a plughost home.
const SHIM_DIR: [&str; 2] = ["cache", "hermes-bin"];

/// Whether `dir` is a plughost home's shim directory (this home's or
/// another's, inherited from a parent plughost): never a real `hermes`.
fn is_shim_dir(dir: &Path) -> bool {
    dir.ends_with(Path::new(SHIM_DIR[0]).join(SHIM_DIR[1]))
}

/// Whether a real `hermes` is on `path` (the `PATH` value).
fn real_hermes_on(path: &str) -> bool {
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(Path::new)
        .any(|d| !is_shim_dir(d) && d.join("hermes").is_file())
}

/// Write the shim under `<plughost home>/cache/hermes-bin/` (when its text
/// changed) and return the directory to put on `PATH`; `None` when a real
/// `hermes` is already on `path`.
pub fn install(plughost_home: &Path, path: &str) -> std::io::Result<Option<PathBuf>> {
    if real_hermes_on(path) {
        return Ok(None);
    }
    let dir = plughost_home.join(SHIM_DIR[0]).join(SHIM_DIR[1]);
    let file = dir.join("hermes");
    let text = script(&plughost_executable(), plughost_home);
    if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
        std::fs::create_dir_all(&dir)?;
        let scratch = dir.join(format!(".hermes.{}", std::process::id()));
        std::fs::write(&scratch, &text)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755))?;
        }
        std::fs::rename(&scratch, &file)?;
    }
    Ok(Some(dir))
}

/// Put the shim's directory at the end of `environ`'s `PATH` (Python's
/// `os.environ`, which processes plugins start inherit). A failure to
/// write it is only logged.
pub fn export(environ: &Bound<'_, PyAny>, plughost_home: &Path) -> PyResult<()> {
    let path: String = environ.call_method1("get", ("PATH", ""))?.extract()?;
    match install(plughost_home, &path) {
        Ok(Some(dir)) => {
            let dir = dir.to_string_lossy().into_owned();
            // Another home's shim (a parent plughost's) gives way to this
            // home's: its commands are another home's plugins.
            let mut kept: Vec<&str> = path
                .split(':')
                .filter(|p| *p == dir || !is_shim_dir(Path::new(p)))
                .collect();
            if !kept.contains(&dir.as_str()) {
                kept.push(&dir);
            }
            let new_path = kept.join(":");
            if new_path != path {
                environ.set_item("PATH", new_path)?;
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!("processes Hermes plugins start will find no `hermes` command: {e}")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_hermes_on_path_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hermes"), "#!/bin/sh\n").unwrap();
        let home = tempfile::tempdir().unwrap();
        let path = dir.path().to_string_lossy().into_owned();
        assert!(install(home.path(), &path).unwrap().is_none());
        let made = install(home.path(), "/nonexistent").unwrap().unwrap();
        assert!(made.join("hermes").is_file());
        // Another plughost home's shim is not a real hermes.
        let other = tempfile::tempdir().unwrap();
        let theirs = install(other.path(), "/nonexistent").unwrap().unwrap();
        let path = theirs.to_string_lossy().into_owned();
        assert!(install(home.path(), &path).unwrap().is_some());
    }
}
