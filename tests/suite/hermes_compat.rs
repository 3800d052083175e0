//! Compat modules Hermes plugins import at call time, and processes they
//! start (issue 21 item 4): `tools.approval` refuses a dangerous command
//! saying how to allow it, `gateway.status` / `gateway.session`,
//! `hermes_cli.config.set_config_value` / `save_env_value`, and a helper
//! run as `sys.executable -m helper` imports `hermes_constants`.

use std::process::Command;
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::Value;

const PROBE: &str = r#"
import json, os, subprocess, sys

HERE = os.path.dirname(__file__)

def probe(args, **kwargs):
    out = {}
    from tools.approval import check_dangerous_command, _get_approval_mode
    out["mode"] = _get_approval_mode()
    out["rm"] = check_dangerous_command("rm -rf /tmp/x", env_type="local")
    out["ls"] = check_dangerous_command("ls -la", env_type="local")

    from gateway.status import is_gateway_running, acquire_scoped_lock, release_scoped_lock
    out["gateway_running"] = is_gateway_running()
    out["lock"] = acquire_scoped_lock("probe", "token-1")[0]
    out["lock_again"] = acquire_scoped_lock("probe", "token-1")[0]
    release_scoped_lock("probe", "token-1")
    from gateway.session import SessionSource, build_session_key
    out["key"] = build_session_key(SessionSource(platform="cli", chat_id="c1"))

    from hermes_cli.config import set_config_value, save_env_value, load_config
    set_config_value("display.skin", "mono")
    save_env_value("PROBE_TOKEN", "s3cret")
    config = load_config()
    out["skin"] = config["display"]["skin"]
    out["enabled_kept"] = config["plugins"]["enabled"]
    out["env"] = os.environ.get("PROBE_TOKEN")

    child = subprocess.run([sys.executable, "-m", "helper"], cwd=HERE,
                           capture_output=True, text=True, timeout=60)
    out["executable"] = sys.executable
    out["child"] = child.stdout.strip() or child.stderr.strip()
    return json.dumps(out)

def register(ctx):
    ctx.register_tool("probe", "compat", {"name": "probe", "parameters": {"type": "object", "properties": {}}}, probe)
"#;

const HELPER: &str =
    "from hermes_constants import get_hermes_home\nprint('child sees', get_hermes_home())\n";

#[test]
fn compat_modules_and_child_processes_work_the_hermes_way() {
    let home = home_with(&[]);
    let hermes = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    std::fs::write(
        hermes.path().join("config.yaml"),
        "# operator's config\nplugins:\n  enabled: [probe]\nmodel: some-model\n",
    )
    .unwrap();
    write_plugin(
        &hermes.path().join("plugins"),
        "probe",
        "name: probe\n",
        &[("__init__.py", PROBE), ("helper.py", HELPER)],
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["tools", "call", "probe"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes.path())
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_LOG");
    let out = run_bounded(cmd, Duration::from_secs(90));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(text.trim()).unwrap();

    assert_eq!(seen["mode"], "manual");
    assert_eq!(seen["rm"]["approved"], false, "{seen:#}");
    let message = seen["rm"]["message"].as_str().unwrap();
    assert!(
        message.contains("approvals.mode: off"),
        "says how to allow: {message}"
    );
    assert_eq!(seen["ls"]["approved"], true);

    assert_eq!(seen["gateway_running"], false);
    assert_eq!(seen["lock"], true);
    assert_eq!(seen["lock_again"], true, "this process already holds it");
    assert_eq!(seen["key"], "agent:main:cli:dm:c1");

    assert_eq!(seen["skin"], "mono");
    assert_eq!(seen["enabled_kept"], serde_json::json!(["probe"]));
    assert_eq!(seen["env"], "s3cret");
    let env_file = std::fs::read_to_string(hermes.path().join(".env")).unwrap();
    assert!(env_file.contains("PROBE_TOKEN=s3cret"), "{env_file}");

    // The helper ran under a real interpreter and imported the compat modules.
    let executable = seen["executable"].as_str().unwrap();
    assert!(
        std::path::Path::new(executable)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("python"),
        "{executable}"
    );
    assert_eq!(
        seen["child"],
        format!("child sees {}", hermes.path().display()),
        "{seen:#}"
    );
}
