//! The bundled `tool-audit` plugin writes its trail off the tool-call path
//! (issue 26): what a host acknowledged is in `calls.jsonl` once the host
//! is gone or the `plughost` command has exited, in the format it always
//! had; a read sees every call before it; the writer appends on its own
//! while the host lives, and a trail removed meanwhile is written anew.
//!
//! The plugin is the real one, copied from `plugins_bundled/tool-audit`
//! into a temporary bundled directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{home_with, wait_until, write_plugin};
use plughost::Host;
use serde_json::{json, Value};

const NOOP: &str = r#"
def register(ctx):
    ctx.register_tool("noop", {"type": "object", "properties": {"x": {"type": "integer"}}}, lambda x=0: "ok")
    def fail():
        raise RuntimeError("no")
    ctx.register_tool("fail", {}, fail)
"#;

/// A bundled directory holding a copy of the real tool-audit plugin.
fn bundled_audit() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins_bundled/tool-audit");
    copy_tree(&source, &dir.path().join("tool-audit"));
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "__pycache__" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

fn home() -> tempfile::TempDir {
    let home = home_with(&["noop"]);
    write_plugin(
        &home.path().join("plugins"),
        "noop",
        "name: noop\n",
        &[("__init__.py", NOOP)],
    );
    home
}

fn trail(home: &Path) -> PathBuf {
    home.join("tool-audit/calls.jsonl")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One record line as the plugin always wrote it: `json.dumps(record,
/// sort_keys=True)` of ts, tool, session_id, duration_ms and success.
fn assert_record(line: &str, tool: &str, session: &str, success: bool) {
    let record: Value = serde_json::from_str(line).unwrap();
    let keys: Vec<&str> = record
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["duration_ms", "session_id", "success", "tool", "ts"],
        "{line}"
    );
    assert_eq!(record["tool"], tool, "{line}");
    assert_eq!(record["session_id"], session, "{line}");
    assert_eq!(record["success"], success, "{line}");
    assert!(record["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
    assert!(record["ts"].as_f64().unwrap() > 1.0e9, "{line}");
    assert!(
        line.starts_with(r#"{"duration_ms": "#) && line.contains(r#", "session_id": ""#),
        "json.dumps separators and key order: {line}"
    );
}

#[test]
fn every_acknowledged_call_is_on_disk_once_the_host_is_gone_and_reads_see_them_before() {
    let (home, bundled) = (home(), bundled_audit());
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let rt = rt();
    rt.block_on(async {
        for _ in 0..200 {
            assert_eq!(
                host.call_tool("noop", json!({"x": 1}), "s1").await.text,
                "ok"
            );
        }
        host.call_tool("fail", json!({}), "s2").await;
        // A read writes out what is queued first: it counts every call.
        let summary = host.call_tool("audit_summary", json!({}), "").await.text;
        assert!(
            summary.starts_with("201 tool call(s) recorded across 2 tool(s):"),
            "{summary}"
        );
        for _ in 0..50 {
            host.call_tool("noop", json!({}), "s1").await;
        }
    });
    drop(host);
    let written = lines(&trail(home.path()));
    assert_eq!(written.len(), 251, "every acknowledged call is on disk");
    assert_record(&written[0], "noop", "s1", true);
    assert_record(&written[200], "fail", "s2", false);
    assert_record(&written[250], "noop", "s1", true);
}

#[test]
fn the_writer_appends_while_the_host_lives_and_a_removed_trail_is_written_anew() {
    let (home, bundled) = (home(), bundled_audit());
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let path = trail(home.path());
    let rt = rt();
    rt.block_on(host.call_tool("noop", json!({}), "a"));
    wait_until("the writer's first line", Duration::from_secs(20), || {
        lines(&path).len() == 1
    });
    std::fs::remove_file(&path).unwrap();
    rt.block_on(host.call_tool("noop", json!({}), "b"));
    wait_until(
        "the line after the trail was removed",
        Duration::from_secs(20),
        || lines(&path).len() == 1,
    );
    assert_record(&lines(&path)[0], "noop", "b", true);
    // /audit clear removes the trail; what follows starts a new one.
    rt.block_on(async {
        let cleared = host.run_command("/audit clear").await.unwrap();
        assert_eq!(cleared.as_deref(), Some("Cleared 1 audit record(s)."));
        host.call_tool("noop", json!({}), "c").await;
    });
    drop(host);
    let written = lines(&path);
    assert_eq!(written.len(), 1, "{written:?}");
    assert_record(&written[0], "noop", "c", true);
}

#[test]
fn a_call_from_the_command_line_is_on_disk_when_the_command_has_exited() {
    let (home, bundled) = (home(), bundled_audit());
    for session in ["one", "two"] {
        let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(["tools", "call", "noop", "--session", session])
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    }
    let written = lines(&trail(home.path()));
    assert_eq!(written.len(), 2, "{written:?}");
    assert_record(&written[0], "noop", "one", true);
    assert_record(&written[1], "noop", "two", true);
}
