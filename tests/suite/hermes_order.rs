//! Hermes's `requires_plugins` (issue 21 item 3): plugins in a Hermes home
//! load after what they require; a missing requirement and a cycle are
//! warned about by name and, as in Hermes (`resolve_plugin_load_order`),
//! disable nothing: a cycle leaves every plugin in plain order.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};

/// Appends the plugin's name to `order.log` in the Hermes home on register.
const INIT: &str = r#"
from hermes_constants import get_hermes_home

def register(ctx):
    with open(get_hermes_home() / "order.log", "a") as f:
        f.write(ctx.manifest.name + "\n")
"#;

/// `plugins list --json` with the Hermes home `hermes`: (order of
/// registration, standard error, each plugin's status).
fn load(hermes: &Path) -> (Vec<String>, String, Vec<(String, String)>) {
    let home = home_with(&[]);
    let bundled = no_bundled();
    let _ = std::fs::remove_file(hermes.join("order.log"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["plugins", "list", "--json"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes)
        .env_remove("PLUGHOST_LOG");
    let out = run_bounded(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["key"].as_str().unwrap().to_string(),
                p["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let order = std::fs::read_to_string(hermes.join("order.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    (order, stderr, status)
}

fn hermes_home(plugins: &[(&str, &str)]) -> tempfile::TempDir {
    let hermes = tempfile::tempdir().unwrap();
    let root = hermes.path().join("plugins");
    let names: Vec<&str> = plugins.iter().map(|(n, _)| *n).collect();
    for (name, requires) in plugins {
        let manifest = format!("name: {name}\nversion: 1.0.0\n{requires}");
        write_plugin(&root, name, &manifest, &[("__init__.py", INIT)]);
    }
    std::fs::write(
        hermes.path().join("config.yaml"),
        format!("plugins:\n  enabled: [{}]\n", names.join(", ")),
    )
    .unwrap();
    hermes
}

#[test]
fn required_plugins_load_first_and_a_missing_one_only_warns() {
    let hermes = hermes_home(&[
        (
            "alpha",
            "requires_plugins: [zeta, {id: beta, version_range: \">=1\"}]\n",
        ),
        ("beta", "requires_plugins: [not-installed]\n"),
        ("mid", ""),
        ("zeta", ""),
    ]);
    let (order, stderr, status) = load(hermes.path());
    // alpha waits for beta and zeta; the others keep discovery order.
    assert_eq!(order, ["beta", "mid", "zeta", "alpha"], "{stderr}");
    assert!(
        status.iter().all(|(_, s)| s == "loaded"),
        "{status:?}\n{stderr}"
    );
    assert!(
        stderr.contains("Hermes plugin 'beta' requires plugin 'not-installed', which is not enabled or installed; loading 'beta' anyway"),
        "{stderr}"
    );
}

#[test]
fn a_cycle_is_named_and_every_plugin_loads_in_plain_order() {
    let hermes = hermes_home(&[
        ("a-first", ""),
        ("c1", "requires_plugins: [c2]\n"),
        ("c2", "requires_plugins: [c1, c2]\n"),
        ("needs-first", "requires_plugins: [z-last]\n"),
        ("z-last", ""),
    ]);
    let (order, stderr, status) = load(hermes.path());
    assert_eq!(
        order,
        ["a-first", "c1", "c2", "needs-first", "z-last"],
        "{stderr}"
    );
    assert!(
        status.iter().all(|(_, s)| s == "loaded"),
        "{status:?}\n{stderr}"
    );
    assert!(
        stderr.contains("Hermes plugin dependency cycle detected (c1 -> c2 -> c1)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Hermes plugin 'c2' declares a dependency on itself; ignoring"),
        "{stderr}"
    );
}

/// The same order for plugins installed into plughost's own directory with
/// `plugins install` (the Hermes dialect chosen from their files).
#[test]
fn installed_hermes_plugins_load_after_what_they_require() {
    let home = home_with(&[]);
    let hermes = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let src = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(60))
    };
    for (name, requires) in [
        ("aa-needs-zz", "requires_plugins: [zz-base]\n"),
        ("zz-base", ""),
    ] {
        let manifest = format!("name: {name}\nversion: 1.0.0\n{requires}");
        let dir = write_plugin(src.path(), name, &manifest, &[("__init__.py", INIT)]);
        let out = run(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
    }
    let _ = std::fs::remove_file(hermes.path().join("order.log"));
    let out = run(&["plugins", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "aa-needs-zz")
        .unwrap();
    assert_eq!(first["dialect"], "hermes", "{first:#}");
    assert_eq!(first["dependencies"], serde_json::json!(["zz-base"]));
    let order = std::fs::read_to_string(hermes.path().join("order.log")).unwrap();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        ["zz-base", "aa-needs-zz"]
    );
}
