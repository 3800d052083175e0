//! The compat modules real public Hermes plugins import beyond the first
//! set (issue 21 item 4): what plughost can back works as Hermes's does
//! (`hermes_cli.config.get_env_value`, `tools.approval.request_tool_approval`
//! refusing with how to allow it, `tools.interrupt`, the newest
//! `VALID_HOOKS`, `discover_plugins`), and what it does not host raises an
//! `ImportError` / `NotImplementedError` saying what is not hosted
//! (`hermes_cli.kanban_db`, `hermes_cli.projects_db`, `cron`, `tools.mcp_oauth`,
//! `has_hook`, `invoke_hook`); a real module of the same name still wins.
//! (`gateway.config` and `gateway.platform_registry` are hosted now, by
//! plughost's messaging gateway: `tests/suite/gateway.rs`.)
//! (`tools.mcp_tool` is hosted now, by plughost's MCP client:
//! `tests/hermes_mcp_tool.rs`.)

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::Value;

const PROBE: &str = r#"
import importlib, json

def probe(args, **kwargs):
    out = {}
    from hermes_cli.config import get_env_value
    out["from_env_file"] = get_env_value("PROBE_FILE_ONLY")
    out["missing_env"] = get_env_value("PROBE_NOT_ANYWHERE")
    from tools.approval import request_tool_approval
    out["approval"] = request_tool_approval("tinyfish_browser", "spend credits", rule_key="tf:browse")
    from tools.interrupt import is_interrupted, set_interrupt
    out["interrupted"] = is_interrupted()
    set_interrupt(True)
    out["interrupted_after_set"] = is_interrupted()
    set_interrupt(False)
    from hermes_cli.plugins import VALID_HOOKS, discover_plugins, has_hook
    out["valid_has_pre_verify"] = "pre_verify" in VALID_HOOKS
    out["discover"] = discover_plugins()
    try:
        has_hook("pre_tool_call")
    except NotImplementedError as e:
        out["has_hook"] = str(e)
    refused = {}
    for name in ["hermes_cli.kanban_db", "hermes_cli.projects_db", "cron", "tools.mcp_oauth",
                 "gateway.config", "gateway.platform_registry"]:
        if name.startswith("gateway."):
            importlib.import_module(name)
            out.setdefault("hosted", []).append(name)
            continue
        try:
            importlib.import_module(name)
            refused[name] = "imported"
        except ImportError as e:
            refused[name] = str(e)
    out["refused"] = refused
    try:
        from hermes_cli import kanban_db
        out["from_import"] = "imported"
    except ImportError as e:
        out["from_import"] = type(e).__name__
    return json.dumps(out)

def register(ctx):
    ctx.register_tool("probe", "compat", {"name": "probe", "parameters": {"type": "object", "properties": {}}}, probe)
"#;

fn call_probe(hermes: &Path, pythonpath: Option<&Path>) -> Value {
    let home = home_with(&[]);
    let bundled = no_bundled();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["tools", "call", "probe"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes)
        .env_remove("PROBE_FILE_ONLY")
        .env_remove("PLUGHOST_LOG");
    match pythonpath {
        Some(p) => cmd.env("PYTHONPATH", p),
        None => cmd.env_remove("PYTHONPATH"),
    };
    let out = run_bounded(cmd, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap()
}

fn hermes_home() -> tempfile::TempDir {
    let hermes = tempfile::tempdir().unwrap();
    std::fs::write(
        hermes.path().join("config.yaml"),
        "plugins:\n  enabled: [probe]\n",
    )
    .unwrap();
    std::fs::write(
        hermes.path().join(".env"),
        "# secrets\nexport PROBE_FILE_ONLY=\"from-dot-env\"\n",
    )
    .unwrap();
    write_plugin(
        &hermes.path().join("plugins"),
        "probe",
        "name: probe\n",
        &[("__init__.py", PROBE)],
    );
    hermes
}

#[test]
fn hosted_modules_work_and_the_rest_say_what_is_not_hosted() {
    let hermes = hermes_home();
    let seen = call_probe(hermes.path(), None);
    assert_eq!(seen["from_env_file"], "from-dot-env", "{seen:#}");
    assert_eq!(seen["missing_env"], Value::Null);
    assert_eq!(seen["approval"]["approved"], false, "{seen:#}");
    assert!(
        seen["approval"]["message"]
            .as_str()
            .unwrap()
            .contains("approvals.mode: off"),
        "{seen:#}"
    );
    assert_eq!(seen["interrupted"], false);
    assert_eq!(seen["interrupted_after_set"], true);
    assert_eq!(seen["valid_has_pre_verify"], true);
    assert_eq!(seen["discover"], Value::Null);
    assert!(
        seen["has_hook"]
            .as_str()
            .unwrap()
            .contains("hermes_cli.plugins.has_hook is not hosted by plughost"),
        "{seen:#}"
    );
    for (name, why) in seen["refused"].as_object().unwrap() {
        let why = why.as_str().unwrap();
        assert!(
            why.starts_with(&format!("{name} is not hosted by plughost: ")),
            "{name}: {why}"
        );
    }
    assert_eq!(seen["refused"].as_object().unwrap().len(), 4);
    assert_eq!(
        seen["hosted"],
        serde_json::json!(["gateway.config", "gateway.platform_registry"])
    );
    assert_eq!(seen["from_import"], "ImportError");

    // approvals.mode: off lets the request through, as Hermes's gate would.
    std::fs::write(
        hermes.path().join("config.yaml"),
        "plugins:\n  enabled: [probe]\napprovals:\n  mode: off\n",
    )
    .unwrap();
    let seen = call_probe(hermes.path(), None);
    assert_eq!(seen["approval"]["approved"], true, "{seen:#}");
}

#[test]
fn a_real_module_of_the_same_name_wins() {
    let hermes = hermes_home();
    let real = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(real.path().join("cron")).unwrap();
    std::fs::write(
        real.path().join("cron").join("__init__.py"),
        "REAL = True\n",
    )
    .unwrap();
    let seen = call_probe(hermes.path(), Some(real.path()));
    assert_eq!(seen["refused"]["cron"], "imported", "{seen:#}");
    assert!(seen["refused"]["tools.mcp_oauth"]
        .as_str()
        .unwrap()
        .contains("not hosted"));
}

/// A Hermes messaging-platform adapter installed into plughost's own
/// directory (as onebot11 is) loads: its adapter's `gateway.config`
/// import works, and its adapter runs under serve's gateway (issue 49).
#[test]
fn an_installed_platform_plugin_loads() {
    let home = home_with(&[]);
    let hermes = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let src = tempfile::tempdir().unwrap();
    let dir = write_plugin(
        src.path(),
        "qq-platform",
        "name: qq-platform\nkind: platform\nversion: 0.1.0\noptional_env: [QQ_TOKEN]\n",
        &[(
            "__init__.py",
            "try:\n    from gateway.config import Platform\n    def register(ctx):\n        pass\nexcept ImportError:\n    register = None\n",
        )],
    );
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(60))
    };
    let out = run(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Loads as a hermes plugin"), "{said}");
    assert!(!said.contains("not callable"), "{said}");
    // Enabled (config.json), it loads.
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["qq-platform"]}}"#,
    )
    .unwrap();
    let out = run(&["plugins", "list", "--json"]);
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let p = list.iter().find(|p| p["key"] == "qq-platform").unwrap();
    assert_eq!(p["status"], "loaded", "{p:#}");
}
