//! uv, the installer and resolver plughost uses (the PyPI package `uv`):
//! found as `PLUGHOST_UV`, else `uv` on `PATH`, else `python3 -m uv`.
//!
//! uv reads its own settings from the environment, which plughost passes
//! through: `UV_INDEX_URL`, `UV_FIND_LINKS` and `UV_NO_INDEX` (a local
//! wheel directory, offline), `UV_CACHE_DIR`. plughost only sets
//! `UV_PYTHON_DOWNLOADS=never` when unset: an interpreter is chosen from
//! the machine's, never fetched behind the user's back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::DepsError;

/// How to run uv.
#[derive(Clone, Debug)]
pub struct Uv {
    program: PathBuf,
    /// `-m uv` when it runs through Python.
    prefix: Vec<OsString>,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn works(program: &Path, prefix: &[OsString]) -> bool {
    Command::new(program)
        .args(prefix)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Uv {
    /// Find uv (see the module docs); [`DepsError::UvMissing`] says how to
    /// get it.
    pub fn locate() -> Result<Uv, DepsError> {
        if let Some(explicit) = std::env::var_os("PLUGHOST_UV").filter(|v| !v.is_empty()) {
            let program = PathBuf::from(explicit);
            return works(&program, &[])
                .then(|| Uv {
                    program,
                    prefix: Vec::new(),
                })
                .ok_or(DepsError::UvMissing);
        }
        if let Some(program) = on_path("uv").filter(|p| works(p, &[])) {
            return Ok(Uv {
                program,
                prefix: Vec::new(),
            });
        }
        let prefix: Vec<OsString> = vec!["-m".into(), "uv".into()];
        if let Some(python) = on_path("python3").filter(|p| works(p, &prefix)) {
            return Ok(Uv {
                program: python,
                prefix,
            });
        }
        Err(DepsError::UvMissing)
    }

    /// A uv command with `args`.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix).args(args).stdin(Stdio::null());
        if std::env::var_os("UV_PYTHON_DOWNLOADS").is_none() {
            cmd.env("UV_PYTHON_DOWNLOADS", "never");
        }
        cmd
    }

    /// Run `cmd`; a non-zero exit is [`DepsError::Unresolvable`] with
    /// uv's own message (`what` says what was attempted).
    pub fn run(&self, mut cmd: Command, what: &str) -> Result<Output, DepsError> {
        let out = cmd.output().map_err(|e| DepsError::Io {
            what: format!("cannot run uv ({})", self.program.display()),
            message: e.to_string(),
        })?;
        if out.status.success() {
            return Ok(out);
        }
        Err(DepsError::Unresolvable {
            what: what.to_string(),
            detail: uv_message(&out.stderr),
            conflicting: Vec::new(),
        })
    }

    /// [`run`](Self::run) for a step that takes a while (an install): a
    /// line saying what it is, then each line uv writes as it writes it
    /// (its "Resolved …", "Prepared …", "Installed …", "+ name==version"),
    /// indented, on standard error — a user no longer watches a blank
    /// terminal for seconds. uv's lines are kept for the error all the same.
    pub fn run_showing(
        &self,
        mut cmd: Command,
        what: &str,
        step: &str,
    ) -> Result<Output, DepsError> {
        use std::io::{BufRead, Read, Write};
        let say = |line: &str| {
            // A failed write (stderr gone) is never fatal.
            let _ = writeln!(std::io::stderr(), "{line}");
        };
        say(step);
        let spawned = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        let mut child = spawned.map_err(|e| DepsError::Io {
            what: format!("cannot run uv ({})", self.program.display()),
            message: e.to_string(),
        })?;
        let mut stdout = child.stdout.take().expect("piped");
        let reading = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stdout.read_to_end(&mut bytes);
            bytes
        });
        let mut stderr = Vec::new();
        let mut lines = std::io::BufReader::new(child.stderr.take().expect("piped"));
        let mut line = Vec::new();
        while lines.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
            let text = String::from_utf8_lossy(&line);
            if !text.trim().is_empty() {
                say(&format!("  {}", text.trim_end()));
            }
            stderr.extend_from_slice(&line);
            line.clear();
        }
        let status = child.wait().map_err(|e| DepsError::Io {
            what: format!("cannot run uv ({})", self.program.display()),
            message: e.to_string(),
        })?;
        let out = Output {
            status,
            stdout: reading.join().unwrap_or_default(),
            stderr,
        };
        if out.status.success() {
            return Ok(out);
        }
        Err(DepsError::Unresolvable {
            what: what.to_string(),
            detail: uv_message(&out.stderr),
            conflicting: Vec::new(),
        })
    }

    /// Whether uv finds a resolution of `requirements` for `python`
    /// (`uv pip compile`, nothing installed): how conflicting plugins are
    /// told apart once a whole set failed.
    pub fn resolves(&self, python: &Path, requirements: &Path) -> bool {
        let mut cmd = self.command(["pip", "compile", "--quiet", "--python"]);
        cmd.arg(python).arg(requirements);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        cmd.status().is_ok_and(|s| s.success())
    }

    /// `name==version` of everything installed at `site` (a `--target`
    /// directory) or in the environment of `python`.
    pub fn freeze(
        &self,
        python: &Path,
        target: Option<&Path>,
    ) -> Result<std::collections::BTreeMap<String, String>, DepsError> {
        let mut cmd = self.command(["pip", "freeze", "--python"]);
        cmd.arg(python);
        if let Some(t) = target {
            cmd.arg("--target").arg(t);
        }
        let out = self.run(cmd, "uv could not list the environment")?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once("=="))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect())
    }
}

/// uv's stderr without its "Using CPython …" chatter.
fn uv_message(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.starts_with("Using ") && !l.trim().is_empty())
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
