//! A changed Codumentor plugin takes effect in one reload: its package
//! (and a submodule) is imported afresh, not taken from `sys.modules`, so
//! the new version's instance is the one that hears `onConfigReload`.

use std::path::Path;

use crate::common::no_bundled;
use serde_json::json;

fn write(dir: &Path, version: &str) {
    std::fs::write(
        dir.join("backend/cver_pkg/version.py"),
        format!("VERSION = {version:?}\n"),
    )
    .unwrap();
}

#[test]
fn a_changed_codumentor_plugin_answers_with_its_new_code_after_one_reload() {
    let home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let log = home.path().join("heard.log");
    let dir = home.path().join("plugins").join("cver");
    std::fs::create_dir_all(dir.join("backend/cver_pkg")).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        "name: cver\ndialect: codumentor\nentry: cver_pkg:Cver\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("backend/cver_pkg/__init__.py"),
        format!(
            r#"
from .version import VERSION

class Cver:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onConfigReload", self.reloaded)

    async def reloaded(self, agent, ctx, payload):
        with open({log:?}, "a") as f:
            f.write(VERSION + "\n")
"#
        ),
    )
    .unwrap();
    write(&dir, "v1");
    let config = |n: u32| {
        let c = json!({"plugins": {"enabled": ["cver"]}, "model": {"n": n}});
        std::fs::write(home.path().join("config.json"), c.to_string()).unwrap();
    };
    config(1);
    let host = std::sync::Arc::new(
        crate::common::builder()
            .home(home.path())
            .bundled_dir(bundled.path())
            .enable_project_plugins(false)
            .build()
            .unwrap(),
    );
    assert!(host.plugins().iter().any(|p| p.key == "cver" && p.loaded));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    config(2);
    rt.block_on(host.reload_now()).unwrap();
    write(&dir, "v2");
    config(3);
    let report = rt.block_on(host.reload_now()).unwrap();
    assert_eq!(report.changed, ["cver"], "{report:?}");
    let heard = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        heard, "v1\nv2\n",
        "the first reload's event reached v1, the second (its files changed) v2"
    );
}
