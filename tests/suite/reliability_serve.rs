//! Issue 27 item 4: bounded resources on `serve`. Slow-loris clients that
//! never finish their headers are cut off at `--header-timeout` and cannot
//! hold more than `--max-connections`, so `/healthz` is answered while they
//! keep coming; MCP HTTP sessions are capped (`--max-mcp-sessions`: 503 past
//! it, room again once one ends). Real binary on loopback, bounded waits.
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

struct Server {
    child: Child,
    addr: String,
    _home: tempfile::TempDir,
    _bundled: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Server {
    let home = common::home_with(&[]);
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--port", "0"])
        .args(extra)
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("PLUGHOST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::serve_url(&mut child)
        .trim_start_matches("http://")
        .to_string();
    Server {
        child,
        addr,
        _home: home,
        _bundled: bundled,
    }
}

/// A client that opens a request and never finishes its headers.
fn slow_loris(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .unwrap();
    s
}

fn healthz(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

#[test]
fn slow_loris_clients_are_cut_off_and_healthz_still_answers() {
    let server = start(&["--max-connections", "8", "--header-timeout", "0.5"]);
    let mut slow: Vec<TcpStream> = (0..16).map(|_| slow_loris(&server.addr)).collect();
    // The server ends a connection whose headers never come.
    let first = &mut slow[0];
    first.set_read_timeout(Some(LIMIT)).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 512];
    let n = first.read(&mut buf).unwrap_or(0);
    let cut = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(started.elapsed() < LIMIT, "never cut off");
    assert!(n == 0 || cut.starts_with("HTTP/1.1 408"), "{cut}");
    // More slow clients than connection slots: a real client still gets in.
    let more: Vec<TcpStream> = (0..16).map(|_| slow_loris(&server.addr)).collect();
    let answer = healthz(&server.addr);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop((slow, more));
}

async fn post_init(client: &reqwest::Client, addr: &str) -> reqwest::Response {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    client
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_sessions_are_capped() {
    let server = start(&["--max-mcp-sessions", "3"]);
    let client = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let r = post_init(&client, &server.addr).await;
        assert_eq!(r.status(), 200);
        sessions.push(r.headers()["mcp-session-id"].to_str().unwrap().to_string());
    }
    let refused = post_init(&client, &server.addr).await;
    assert_eq!(refused.status(), 503);
    let body = refused.text().await.unwrap();
    assert!(body.contains("too many MCP sessions open (3)"), "{body}");
    let ended = client
        .delete(format!("http://{}/mcp", server.addr))
        .header("mcp-session-id", &sessions[0])
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    let deadline = Instant::now() + LIMIT;
    while post_init(&client, &server.addr).await.status() != 200 {
        assert!(Instant::now() < deadline, "no room after a session ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
