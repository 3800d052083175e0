//! Reload without restart (issue 24 item 4), on a host in this process:
//! a changed plugin's new version answers, a broken new version leaves the
//! old one answering, a removed plugin goes (its teardown runs), a call
//! that started before a reload finishes on the old version, and a
//! Codumentor plugin's `onConfigReload` sees the changed sections.

use std::path::Path;
use std::time::Duration;

use crate::common::{home_with, no_bundled, wait_until, write_plugin};
use plughost::host::Host;
use serde_json::json;

/// A Flowly plugin whose `ver` tool answers `version`; with `slow`, the
/// tool first writes `<home>/started` and waits for `<home>/go`.
fn versioned(home: &Path, version: &str) -> String {
    format!(
        r#"
import os, time

def ver(slow: bool = False):
    if slow:
        home = {home:?}
        open(os.path.join(home, "started"), "w").close()
        while not os.path.exists(os.path.join(home, "go")):
            time.sleep(0.01)
    return "{version}"

def register(ctx):
    ctx.register_tool("ver", {{"type": "object", "properties": {{"slow": {{"type": "boolean"}}}}}}, ver)
"#
    )
}

fn build(home: &Path, bundled: &Path) -> Host {
    Host::builder()
        .home(home)
        .bundled_dir(bundled)
        .enable_project_plugins(false)
        .build()
        .unwrap()
}

fn call(host: &Host, args: serde_json::Value) -> String {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(host.call_tool("ver", args, ""))
        .text
}

#[test]
fn a_changed_plugin_answers_with_its_new_version_and_a_broken_one_keeps_the_old() {
    let home = home_with(&["ver"]);
    let bundled = no_bundled();
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "ver",
        "name: ver\nversion: '1'\n",
        &[("__init__.py", &versioned(home.path(), "v1"))],
    );
    let host = build(home.path(), bundled.path());
    assert_eq!(call(&host, json!({})), "v1");

    // Nothing changed: nothing reloads.
    let report = host.reload().unwrap();
    assert!(report.is_empty(), "{report:?}");
    assert_eq!(report.generation, 1);

    write_plugin(
        &plugins,
        "ver",
        "name: ver\nversion: '2'\n",
        &[("__init__.py", &versioned(home.path(), "v2"))],
    );
    let report = host.reload().unwrap();
    assert_eq!(report.changed, ["ver"], "{report:?}");
    assert_eq!(call(&host, json!({})), "v2");
    assert_eq!(host.loaded_versions()[0].version, "2");

    // A new version that raises on import: the old one keeps answering.
    write_plugin(
        &plugins,
        "ver",
        "name: ver\nversion: '3'\n",
        &[("__init__.py", "raise RuntimeError('broken v3')\n")],
    );
    let report = host.reload().unwrap();
    assert!(report.changed.is_empty(), "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(report.failed[0].key, "ver");
    assert!(report.failed[0].error.contains("broken v3"), "{report:?}");
    assert_eq!(call(&host, json!({})), "v2");
    let versions = host.loaded_versions();
    assert_eq!(versions[0].version, "2");
    assert!(versions[0]
        .new_version_failed
        .as_deref()
        .unwrap()
        .contains("broken v3"));

    // Fixed again: the new version answers.
    write_plugin(
        &plugins,
        "ver",
        "name: ver\nversion: '4'\n",
        &[("__init__.py", &versioned(home.path(), "v4"))],
    );
    let report = host.reload().unwrap();
    assert_eq!(report.changed, ["ver"], "{report:?}");
    assert_eq!(call(&host, json!({})), "v4");
    assert!(host.loaded_versions()[0].new_version_failed.is_none());

    // Removed: the tool is gone.
    std::fs::remove_dir_all(plugins.join("ver")).unwrap();
    let report = host.reload().unwrap();
    assert_eq!(report.removed, ["ver"], "{report:?}");
    assert!(host.registry().tool("ver").is_none());
}

#[test]
fn a_call_that_started_before_a_reload_finishes_on_the_old_version() {
    let home = home_with(&["slowver"]);
    let bundled = no_bundled();
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "slowver",
        "name: slowver\n",
        &[("__init__.py", &versioned(home.path(), "old"))],
    );
    let host = std::sync::Arc::new(build(home.path(), bundled.path()));
    let calling = host.clone();
    let running = std::thread::spawn(move || call(&calling, json!({"slow": true})));
    wait_until("the slow call to start", Duration::from_secs(20), || {
        home.path().join("started").exists()
    });
    write_plugin(
        &plugins,
        "slowver",
        "name: slowver\n",
        &[("__init__.py", &versioned(home.path(), "new"))],
    );
    let report = host.reload().unwrap();
    assert_eq!(report.changed, ["slowver"], "{report:?}");
    std::fs::write(home.path().join("go"), "").unwrap();
    assert_eq!(running.join().unwrap(), "old");
    assert_eq!(call(&host, json!({})), "new");
}

/// A Hermes plugin's `on_unload` runs when a reload removes it.
#[test]
fn a_removed_hermes_plugin_is_torn_down() {
    let home = home_with(&["bye"]);
    let bundled = no_bundled();
    let plugins = home.path().join("plugins");
    let marker = home.path().join("unloaded");
    write_plugin(
        &plugins,
        "bye",
        "name: bye\n",
        &[(
            "__init__.py",
            &format!(
                r#"
def register(ctx):
    ctx.on_unload(lambda: open({marker:?}, "w").close())
"#
            ),
        )],
    );
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["bye"], "dialects": {"bye": "hermes"}}}).to_string(),
    )
    .unwrap();
    let host = build(home.path(), bundled.path());
    let record = host
        .plugins()
        .iter()
        .find(|p| p.key == "bye")
        .cloned()
        .unwrap();
    assert!(record.loaded, "{:?}", record.error);
    std::fs::remove_dir_all(plugins.join("bye")).unwrap();
    let report = host.reload().unwrap();
    assert_eq!(report.removed, ["bye"], "{report:?}");
    assert!(marker.exists(), "on_unload did not run");
}

#[test]
fn codumentor_on_config_reload_gets_the_changed_sections() {
    let home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let log = home.path().join("reloads.log");
    let dir = home.path().join("plugins").join("watcher");
    std::fs::create_dir_all(dir.join("backend/watch_pkg")).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        "name: watcher\ndialect: codumentor\nentry: watch_pkg:Watcher\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("backend/watch_pkg/__init__.py"),
        format!(
            r#"
import json

class Watcher:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onConfigReload", self.reloaded)

    async def reloaded(self, agent, ctx, payload):
        with open({log:?}, "a") as f:
            f.write(json.dumps({{"sections": payload["sections"], "model": payload["config"].get("model")}}) + "\n")
"#
        ),
    )
    .unwrap();
    let config = |extra: serde_json::Value| {
        let mut c = json!({"plugins": {"enabled": ["watcher"]}});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        std::fs::write(home.path().join("config.json"), c.to_string()).unwrap();
    };
    config(json!({"model": {"name": "a"}}));
    let host = std::sync::Arc::new(build(home.path(), bundled.path()));
    let record = host
        .plugins()
        .iter()
        .find(|p| p.key == "watcher")
        .cloned()
        .unwrap();
    assert!(record.loaded, "{:?}", record.error);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // No section changed: no onConfigReload.
    rt.block_on(host.reload_now()).unwrap();
    assert!(!log.exists());
    config(json!({"model": {"name": "b"}, "web": {"on": true}}));
    let report = rt.block_on(host.reload_now()).unwrap();
    assert_eq!(report.config_sections, ["model", "web"], "{report:?}");
    let lines = std::fs::read_to_string(&log).unwrap();
    let seen: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(
        seen,
        json!({"sections": ["model", "web"], "model": {"name": "b"}})
    );
}
