//! A Hermes `plugin.yaml` with `manifest_version: 2` (the highest Hermes
//! reads) or a newer one (Hermes loads it with a warning) installs with
//! `plugins install` and loads as a Hermes plugin, its tool registered;
//! a plugin whose code is not Hermes's keeps plughost's own limit (max 1).

use std::path::Path;
use std::process::Output;

use serde_json::Value;

const HERMES_CODE: &str = r#"
import json

def ping(args, **kwargs):
    return json.dumps({"pong": True})

def register(ctx):
    ctx.register_tool("v2_ping", "vtwo",
        {"name": "v2_ping", "description": "Answer pong",
         "parameters": {"type": "object", "properties": {}}},
        ping)
"#;

fn cli(home: &Path, bundled: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PYTHONPATH")
        .output()
        .unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `plugins install` of a plugin with `manifest_version: <version>` and
/// `code` as its `__init__.py`, then enable and list it.
fn install(version: u32, code: &str) -> (Output, Option<Value>) {
    let src = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let dir = src.path().join("vtwo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        format!(
            "name: vtwo\nversion: 2.0.0\nmanifest_version: {version}\nprovides_tools: [v2_ping]\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("__init__.py"), code).unwrap();
    let out = cli(
        home.path(),
        bundled.path(),
        &["plugins", "install", dir.to_str().unwrap()],
    );
    if !out.status.success() {
        return (out, None);
    }
    let enabled = cli(home.path(), bundled.path(), &["plugins", "enable", "vtwo"]);
    assert!(enabled.status.success(), "{}", said(&enabled));
    let list = cli(home.path(), bundled.path(), &["plugins", "list", "--json"]);
    assert!(list.status.success(), "{}", said(&list));
    let all: Vec<Value> = serde_json::from_slice(&list.stdout).unwrap();
    let record = all.into_iter().find(|p| p["key"] == "vtwo");
    (out, record)
}

#[test]
fn a_hermes_manifest_version_2_installs_and_loads() {
    let (out, record) = install(2, HERMES_CODE);
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("Installed vtwo 2.0.0"),
        "{}",
        said(&out)
    );
    let record = record.expect("listed");
    assert_eq!(record["dialect"], "hermes", "{record:#}");
    assert_eq!(record["loaded"], true, "{record:#}");
    assert_eq!(
        record["tools"],
        serde_json::json!(["v2_ping"]),
        "{record:#}"
    );
}

#[test]
fn a_newer_hermes_manifest_version_loads_as_hermes_does() {
    let (out, record) = install(3, HERMES_CODE);
    assert!(out.status.success(), "{}", said(&out));
    let record = record.expect("listed");
    assert_eq!(
        record["tools"],
        serde_json::json!(["v2_ping"]),
        "{record:#}"
    );
}

#[test]
fn a_plugin_whose_code_is_not_hermes_keeps_plughosts_limit() {
    let (out, _) = install(2, "def register(ctx):\n    pass\n");
    assert!(!out.status.success());
    assert!(said(&out).contains("manifest_version 2"), "{}", said(&out));
}
