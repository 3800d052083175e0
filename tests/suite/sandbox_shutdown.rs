//! `plughost serve` stopped by SIGTERM while confined plugins run (issue
//! 50): a worker whose only way out is plughost's proxy (a list of hosts),
//! a default-confined one, and an isolated bundle's confined MCP server.
//! serve exits cleanly (status 0, within its grace), and nothing it
//! started is left: no process that carries its home in its environment,
//! no cgroup of its workers.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::write_plugin;
use serde_json::json;

const FLOWLY: &str = r#"
import urllib.request

def register(ctx):
    def fetch(url=""):
        try:
            return urllib.request.urlopen(url, timeout=20).read().decode()
        except urllib.error.HTTPError as e:
            return "HTTPError %d" % e.code
    ctx.register_tool("f_fetch", {"type": "object", "properties": {"url": {"type": "string"}}}, fetch)
"#;

/// Processes (other than this one) whose environment holds `marker`.
fn carrying(marker: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    let me = std::process::id() as i32;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            let cmd = std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, cmd.replace('\0', " ")));
        }
    }
    found
}

/// The cgroups serve `pid` made for its workers and still there.
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let Some(parent) = &plughost::isolation::sandbox::support().cgroup_parent else {
        return Vec::new();
    };
    let prefix = format!("plughost-{pid}-");
    std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn write_mcp_bundle(dir: &Path, python: &str) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "tools", "version": "1.0.0"}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("server.py"), crate::mcp_client_common::SERVER).unwrap();
    std::fs::write(
        dir.join(".mcp.json"),
        json!({"mcpServers": {"t": {"command": python,
            "args": ["${CLAUDE_PLUGIN_ROOT}/server.py", "stdio"]}}})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn serve_stopped_by_sigterm_with_confined_plugins_exits_cleanly_and_leaves_nothing() {
    let missing = plughost::isolation::sandbox::support().missing();
    assert!(
        missing.is_empty(),
        "this test needs the whole sandbox: {missing:?}"
    );
    let Some(python) = crate::mcp_client_common::mcp_python() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home/.plughost");
    for d in ["tmp", "bundled", "home"] {
        std::fs::create_dir_all(root.path().join(d)).unwrap();
    }
    let plugins = home.join("plugins");
    write_plugin(
        &plugins,
        "fence",
        "name: fence\nversion: 1.0\n",
        &[("__init__.py", FLOWLY)],
    );
    write_plugin(
        &plugins,
        "plain",
        "name: plain\nversion: 1.0\n",
        &[("__init__.py", FLOWLY.replace("f_fetch", "p_fetch").as_str())],
    );
    write_mcp_bundle(&plugins.join("tools"), &python);
    // The allowed host accepts and never answers: a call through the
    // proxy is in flight when serve is stopped.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let (reached_tx, reached) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().flatten() {
            held.push(conn);
            let _ = reached_tx.send(());
        }
    });
    std::fs::write(
        home.join("config.json"),
        json!({"plugins": {"enabled": ["fence", "plain", "tools"], "disabled": [],
            "entries": {"fence": {"sandbox": {"network": [format!("localhost:{silent_port}")]}}}}})
        .to_string(),
    )
    .unwrap();
    let script = root.path().join("script.yaml");
    std::fs::write(
        &script,
        format!("turns:\n  - tool_calls:\n      - name: f_fetch\n        args: {{url: \"http://localhost:{silent_port}/\"}}\n  - say: done\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--shutdown-grace",
            "2",
            "--script",
        ])
        .arg(&script)
        .current_dir(root.path())
        .env("HOME", root.path().join("home"))
        .env("TMPDIR", root.path().join("tmp"))
        .env("PLUGHOST_HOME", &home)
        .env("PLUGHOST_BUNDLED_DIR", root.path().join("bundled"))
        .env("XDG_CACHE_HOME", root.path().join("home/.cache"))
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    let mut line = String::new();
    while !log.contains("listening on ") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve ended early: {log}"
        );
        log.push_str(&line);
    }
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        rest
    });
    let marker = format!("PLUGHOST_HOME={}", home.display());
    let pid = child.id();
    // Both workers and the MCP server run, each in a cgroup of its own.
    assert!(
        wait_until(Duration::from_secs(30), || cgroups_of(pid).len() >= 3),
        "cgroups: {:?}; processes: {:?}",
        cgroups_of(pid),
        carrying(&marker)
    );
    // A turn whose tool call waits on the silent host through the proxy.
    let url = log
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    std::thread::spawn(move || {
        use std::io::Write;
        let body = r#"{"model": "m", "messages": [{"role": "user", "content": "go"}]}"#;
        let Ok(mut conn) = std::net::TcpStream::connect(&url) else {
            return;
        };
        let _ = write!(
            conn,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {url}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.read_to_end(&mut Vec::new());
    });
    reached
        .recv_timeout(Duration::from_secs(60))
        .expect("the plugin's call reached the allowed host through the proxy");
    // SAFETY: a signal to the serve process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let mut status = None;
    let exited = wait_until(Duration::from_secs(30), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let log = log + &rest.join().unwrap();
    assert!(exited, "serve did not exit within 30 s of SIGTERM: {log}");
    assert!(
        status.unwrap().success(),
        "serve exited with {status:?}: {log}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || carrying(&marker).is_empty()),
        "left running: {:?}\n{log}",
        carrying(&marker)
    );
    assert_eq!(cgroups_of(pid), Vec::<PathBuf>::new(), "{log}");
}
