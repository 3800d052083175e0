//! Issue 27 item 6: a plugin that declares itself a guard
//! (`fail_closed: true` in its manifest) keeps refusing while it cannot
//! answer: its worker crashed, or its breaker is open and its calls fail at
//! once. A plugin that is not a guard fails open, as before. `plugins
//! doctor` (its report) and `/metrics` show the refusing guard.
use crate::common;

use std::path::Path;
use std::time::Duration;

use plughost::isolation::{WorkerCommand, WorkerState};
use plughost::plugins::config::Isolation;
use plughost::Host;
use serde_json::json;

/// Its `pre_tool_call` hook segfaults on every call.
const CRASHING_GUARD: &str = r#"
import ctypes
def register(ctx):
    ctx.register_hook("pre_tool_call", lambda c: ctypes.string_at(0))
"#;

const TOOL: &str = "def register(ctx):\n    ctx.register_tool('danger', {'type': 'object'}, lambda: 'the dangerous thing ran')\n";

fn host(guard_manifest: &str, isolate: Isolation) -> (tempfile::TempDir, tempfile::TempDir, Host) {
    let home = common::home_with(&["guard", "tools"]);
    let plugins = home.path().join("plugins");
    common::write_plugin(
        &plugins,
        "guard",
        guard_manifest,
        &[("__init__.py", CRASHING_GUARD)],
    );
    common::write_plugin(&plugins, "tools", "name: tools\n", &[("__init__.py", TOOL)]);
    let bundled = common::no_bundled();
    let host = builder(home.path(), bundled.path())
        .isolate(isolate)
        .isolation_breaker(2, Duration::from_secs(60))
        .build()
        .unwrap();
    (home, bundled, host)
}

fn builder(home: &Path, bundled: &Path) -> plughost::HostBuilder {
    Host::builder()
        .home(home)
        .bundled_dir(bundled)
        .worker_command(WorkerCommand::binary(env!("CARGO_BIN_EXE_plughost")))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_guard_keeps_refusing_while_its_breaker_is_open() {
    let (_home, _bundled, host) = host(
        "name: guard\nfail_closed: true\n",
        Isolation::Only(vec!["guard".into()]),
    );
    let rt = rt();
    for _ in 0..4 {
        let r = rt.block_on(host.call_tool("danger", json!({}), ""));
        assert!(!r.text.contains("the dangerous thing ran"), "{}", r.text);
        assert!(r.text.contains("guard plugin 'guard'"), "{}", r.text);
    }
    let status = host.worker_status("guard").unwrap();
    assert_eq!(status.state, WorkerState::Disabled, "{status:?}");
    assert!(status.fail_closed);
    let report = plughost::host::doctor::Report::new(&host);
    let json = serde_json::to_value(&report).unwrap();
    let guard = json["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "guard")
        .unwrap();
    assert_eq!(guard["fail_closed"], true, "{guard}");
    assert_eq!(guard["worker"]["state"], "disabled", "{guard}");
    let metrics = plughost::serve::metrics::Metrics::default().render(&host);
    assert!(
        metrics.contains("plughost_guard_refusing{plugin=\"guard\"} 1"),
        "{metrics}"
    );
}

#[test]
fn a_plugin_that_is_no_guard_still_fails_open() {
    let (_home, _bundled, host) = host("name: guard\n", Isolation::Only(vec!["guard".into()]));
    let rt = rt();
    let r = rt.block_on(host.call_tool("danger", json!({}), ""));
    assert_eq!(r.text, "the dangerous thing ran");
}

#[test]
fn an_in_process_guard_that_raises_refuses_too() {
    let home = common::home_with(&["guard", "tools"]);
    let plugins = home.path().join("plugins");
    common::write_plugin(
        &plugins,
        "guard",
        "name: guard\nfail_closed: true\n",
        &[("__init__.py", "def register(ctx):\n    def check(c):\n        raise RuntimeError('policy store down')\n    ctx.register_hook('pre_tool_call', check)\n")],
    );
    common::write_plugin(&plugins, "tools", "name: tools\n", &[("__init__.py", TOOL)]);
    let bundled = common::no_bundled();
    let host = builder(home.path(), bundled.path())
        .isolate(Isolation::None)
        .build()
        .unwrap();
    let r = rt().block_on(host.call_tool("danger", json!({}), ""));
    assert!(r.text.contains("guard plugin 'guard'"), "{}", r.text);
    assert!(!r.text.contains("the dangerous thing ran"), "{}", r.text);
}
