//! Issue 26 item 3: a host build whose plugins will start Python reads
//! and sniffs the plugin directories on a helper thread while the
//! interpreter starts. One test in this file: the interpreter starts once
//! per process, and only a build that starts it has anything to overlap.
//!
//! Shown with what the build logs: a manifest warning comes from the
//! helper thread (`plughost-discovery`), to the subscriber of the thread
//! that built the host (an embedder's scoped one), and every plugin loads
//! as it would without the helper, the Hermes one with its sniffed dialect.

use std::io::Write;
use std::sync::{Arc, Mutex};

use plughost::Host;
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn plugin(home: &std::path::Path, name: &str, manifest: &str, code: &str) {
    let dir = home.join("plugins").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), manifest).unwrap();
    std::fs::write(dir.join("__init__.py"), code).unwrap();
}

#[test]
fn discovery_runs_beside_the_interpreters_start_and_logs_to_the_builders_subscriber() {
    crate::alone!(discovery_runs_beside_the_interpreters_start_and_logs_to_the_builders_subscriber);
    let home = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    plugin(
        home.path(),
        "odd",
        "name: odd\nkind: sideways\n",
        "def register(ctx):\n    ctx.register_tool('odd_tool', {'type': 'object', 'properties': {}}, lambda: 'odd')\n",
    );
    // A Hermes plugin as Hermes ships them: found as one by its sniff.
    plugin(
        home.path(),
        "herm",
        "name: herm\nversion: 0.1.0\nprovides_tools: [herm_tool]\n",
        "def _handler(args, **kwargs):\n    return 'herm'\n\ndef register(ctx):\n    ctx.register_tool('herm_tool', 'herm', {'name': 'herm_tool', 'description': 'd', 'parameters': {'type': 'object', 'properties': {}}}, _handler)\n",
    );
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["odd", "herm"]}}"#,
    )
    .unwrap();

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_thread_names(true)
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let host = tracing::subscriber::with_default(subscriber, || {
        Host::builder()
            .home(home.path())
            .bundled_dir(empty.path())
            .build()
            .unwrap()
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warning = log
        .lines()
        .find(|l| l.contains("unknown kind 'sideways'"))
        .unwrap_or_else(|| panic!("no manifest warning in:\n{log}"));
    assert!(
        warning.contains("plughost-discovery"),
        "discovery did not run on its helper thread: {warning}"
    );
    let herm = host
        .plugins()
        .iter()
        .find(|r| r.key == "herm")
        .cloned()
        .unwrap();
    assert_eq!(
        herm.dialect.map(|d| d.to_string()).as_deref(),
        Some("hermes")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(host.call_tool("odd_tool", json!({}), "s").await.text, "odd");
        assert_eq!(
            host.call_tool("herm_tool", json!({}), "s").await.text,
            "herm"
        );
    });
}
