//! What a process a Hermes plugin starts finds (issue 52 item 3): with a
//! virtualenv active, `sys.executable` is the virtualenv's interpreter and
//! its packages come before the base interpreter's on `sys.path` (an old
//! `typing_extensions` in the base must not shadow the virtualenv's); and a
//! `hermes` command on `PATH` that runs the plugin's own CLI command, as
//! plugins that shell out to `hermes <their command> …` expect, and refuses
//! Hermes's other subcommands with a clear message.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

/// A plugin in the shape of the public ones that drive their own CLI
/// through `hermes` (`subprocess.check_output(["hermes", "fixlab", …])`).
const PROBE: &str = r#"
import json, os, subprocess, sys

def setup(parser):
    parser.add_argument("word")

def handle(args):
    print(f"probe says {args.word}")
    return 0

def child_probe(args, **kwargs):
    out = {}
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.prefix)"],
                           capture_output=True, text=True, timeout=60)
    out["child_prefix"] = child.stdout.strip()
    venv = os.environ.get("VIRTUAL_ENV", "")
    sites = [i for i, p in enumerate(sys.path) if p.endswith("site-packages")]
    venv_sites = [i for i, p in enumerate(sys.path) if venv and p.startswith(venv) and p.endswith("site-packages")]
    out["venv_first"] = bool(venv_sites) and venv_sites[0] == sites[0]
    import shadow_probe
    out["shadow"] = shadow_probe.WHERE
    ran = subprocess.run(["hermes", "probe", "hello"], capture_output=True, text=True, timeout=60)
    out["cli"] = [ran.returncode, ran.stdout.strip()]
    refused = subprocess.run(["hermes", "kanban", "list"], capture_output=True, text=True, timeout=60)
    out["kanban"] = [refused.returncode, refused.stderr.strip()]
    version = subprocess.run(["hermes", "--version"], capture_output=True, text=True, timeout=60)
    out["version"] = version.stdout.strip()
    return json.dumps(out)

def register(ctx):
    ctx.register_cli_command("probe", "Probe things", setup, handle)
    ctx.register_tool("child_probe", "probe", {"name": "child_probe", "parameters": {"type": "object", "properties": {}}}, child_probe)
"#;

fn make_venv(at: &Path) {
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(at)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
}

fn site_packages(venv: &Path) -> std::path::PathBuf {
    let lib = venv.join("lib");
    let python = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python"))
        .expect("a lib/pythonX.Y");
    python.path().join("site-packages")
}

#[test]
fn a_plugins_child_runs_the_virtualenvs_python_and_finds_a_hermes_command() {
    let work = tempfile::tempdir().unwrap();
    let venv = work.path().join("venv");
    make_venv(&venv);
    // A module the virtualenv has, and a copy elsewhere on the path after
    // the base's site-packages would be: the virtualenv's must win.
    std::fs::write(
        site_packages(&venv).join("shadow_probe.py"),
        "WHERE = 'venv'\n",
    )
    .unwrap();
    let plughost_home = tempfile::tempdir().unwrap();
    let hermes_home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    std::fs::write(
        hermes_home.path().join("config.yaml"),
        "plugins:\n  enabled: [probe]\n",
    )
    .unwrap();
    write_plugin(
        &hermes_home.path().join("plugins"),
        "probe",
        "name: probe\n",
        &[("__init__.py", PROBE)],
    );
    let path = std::env::var("PATH").unwrap_or_default();
    assert!(
        !path
            .split(':')
            .any(|d| Path::new(d).join("hermes").is_file()),
        "a real `hermes` is on PATH here: this test needs plughost's own"
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["tools", "call", "child_probe"])
        .env("PLUGHOST_HOME", plughost_home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes_home.path())
        .env("VIRTUAL_ENV", &venv)
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_LOG");
    let out = run_bounded(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let venv_real = std::fs::canonicalize(&venv).unwrap();
    let child = std::fs::canonicalize(v["child_prefix"].as_str().unwrap()).unwrap();
    assert_eq!(child, venv_real, "{v:#}");
    assert_eq!(v["venv_first"], true, "{v:#}");
    assert_eq!(v["shadow"], "venv", "{v:#}");
    assert_eq!(
        v["cli"],
        serde_json::json!([0, "probe says hello"]),
        "{v:#}"
    );
    assert_eq!(v["kanban"][0], 2, "{v:#}");
    assert!(
        v["kanban"][1]
            .as_str()
            .unwrap()
            .contains("hermes kanban: not provided by plughost"),
        "{v:#}"
    );
    assert_eq!(v["version"], "hermes (provided by plughost)");
}
