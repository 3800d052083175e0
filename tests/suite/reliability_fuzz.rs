//! Issue 27 item 7: fuzzing (proptest, a bounded number of cases) of the
//! request parsers of the long-running hosts, through the real binary:
//! arbitrary HTTP requests (methods, paths, headers, bodies, raw bytes) to
//! `serve`, arbitrary JSON bodies to its `/mcp`, and arbitrary lines to
//! `plughost mcp` on stdio. Each case must get an answer (or a close)
//! within a bound, never a 5xx other than the 503 of a full server, and
//! the server must go on answering. The manifest, config and SSE parsers
//! have their own property tests (`properties_config_manifest.rs`,
//! `sse_props.rs`).
use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{json, Value};

const BOUND: Duration = Duration::from_secs(20);

struct Serve {
    child: Child,
    addr: String,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn plughost(home: &std::path::Path, bundled: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("PLUGHOST_LOG");
    cmd
}

static SERVE: OnceLock<Mutex<Serve>> = OnceLock::new();

/// The lock, when no thread holds it; a case that failed holding it (a
/// poisoned lock) still lets go of its child.
fn unpoisoned<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Stop the shared `serve` and remove its home when the test process
/// exits: a static is never dropped, and the server would outlive the
/// suite (found running after a full test run).
extern "C" fn stop_serve() {
    if let Some(mut serve) = SERVE.get().and_then(unpoisoned) {
        let _ = serve.child.kill();
        let _ = serve.child.wait();
        let _ = std::fs::remove_dir_all(serve._dirs.0.path());
        let _ = std::fs::remove_dir_all(serve._dirs.1.path());
    }
}

/// One `serve` for every case of the binary (started on first use,
/// stopped at exit).
fn serve() -> &'static Mutex<Serve> {
    SERVE.get_or_init(|| {
        // SAFETY: registers a plain function with no arguments, called
        // once by the C runtime at exit.
        unsafe { libc::atexit(stop_serve) };
        let (home, bundled) = (common::home_with(&[]), common::no_bundled());
        let mut child = plughost(home.path(), bundled.path())
            .args([
                "serve",
                "--port",
                "0",
                "--max-body-bytes",
                "65536",
                "--header-timeout",
                "2",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let addr = loop {
            line.clear();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "serve ended early"
            );
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stderr.read_to_string(&mut rest);
        });
        Mutex::new(Serve {
            child,
            addr,
            _dirs: (home, bundled),
        })
    })
}

/// Send `bytes` and read the answer's status line (None: closed, or
/// still waiting for the rest of a request after `wait`).
fn exchange(addr: &str, bytes: &[u8], wait: Duration) -> Option<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let _ = s.write_all(bytes);
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).to_string();
    text.lines()
        .next()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
}

fn assert_alive(addr: &str) {
    let status = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        BOUND,
    );
    assert_eq!(
        status.as_deref(),
        Some("HTTP/1.1 200 OK"),
        "the server stopped answering"
    );
}

fn status_code(line: &str) -> u16 {
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z/_]{0,12}".prop_map(Value::String),
        Just(json!("2.0")),
        Just(json!("initialize")),
        Just(json!("tools/call")),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_string()),
                    Just("id".to_string()),
                    Just("method".to_string()),
                    Just("params".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn http_request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("DELETE"),
        Just("PUT"),
        Just("OPTIONS"),
        Just("BREW"),
        Just("")
    ];
    let path = prop_oneof![
        Just("/healthz".to_string()),
        Just("/mcp".to_string()),
        Just("/v1/chat/completions".to_string()),
        Just("/v1/models".to_string()),
        "/[ -~]{0,40}",
    ];
    let header = ("[A-Za-z-]{1,16}", "[ -~]{0,40}");
    (
        method,
        path,
        prop::collection::vec(header, 0..6),
        prop::collection::vec(any::<u8>(), 0..256),
        any::<bool>(),
    )
        .prop_map(|(m, p, headers, body, with_length)| {
            let mut out = format!("{m} {p} HTTP/1.1\r\nhost: x\r\n");
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            if with_length {
                out.push_str(&format!("content-length: {}\r\n", body.len()));
            }
            out.push_str("connection: close\r\n\r\n");
            let mut bytes = out.into_bytes();
            bytes.extend(body);
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_http_requests_get_an_answer_and_the_server_goes_on(request in http_request()) {
        let serve = serve().lock().unwrap_or_else(|e| e.into_inner());
        // A request whose body is shorter than announced waits for it.
        if let Some(line) = exchange(&serve.addr, &request, Duration::from_millis(500)) {
            let code = status_code(&line);
            prop_assert!(code == 0 || code < 500 || code == 503, "{line}");
        }
        assert_alive(&serve.addr);
    }

    #[test]
    fn raw_bytes_never_take_serve_down(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let serve = serve().lock().unwrap_or_else(|e| e.into_inner());
        let _ = exchange(&serve.addr, &bytes, Duration::from_millis(100));
        assert_alive(&serve.addr);
    }

    #[test]
    fn arbitrary_json_to_mcp_http_never_takes_serve_down(body in json_value(), session in any::<bool>()) {
        let serve = serve().lock().unwrap_or_else(|e| e.into_inner());
        let body = body.to_string();
        let session = if session { "mcp-session-id: not-a-session\r\n" } else { "" };
        let request = format!(
            "POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n{session}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        if let Some(line) = exchange(&serve.addr, request.as_bytes(), BOUND) {
            let code = status_code(&line);
            prop_assert!(code < 500 || code == 503, "{line} for {body}");
        }
        assert_alive(&serve.addr);
    }
}

/// `plughost mcp` on stdio, initialized, shared by the cases.
struct Stdio_ {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Stdio_ {
    fn start() -> Stdio_ {
        let (home, bundled) = (common::home_with(&[]), common::no_bundled());
        let mut child = plughost(home.path(), bundled.path())
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut s = Stdio_ {
            child,
            stdin,
            lines,
            next_id: 1_000_000,
            _dirs: (home, bundled),
        };
        s.line(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "0"}}})
            .to_string(),
        );
        s.answer(0);
        s.line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        s
    }

    fn line(&mut self, text: &str) {
        writeln!(self.stdin, "{text}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(BOUND)
                .expect("plughost mcp answered");
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["id"] == id {
                return v;
            }
        }
    }

    /// A ping still gets its answer: the session is alive and in step.
    fn in_step(&mut self) {
        self.next_id += 1;
        let id = self.next_id;
        self.line(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string());
        let pong = self.answer(id);
        assert!(pong.get("result").is_some(), "{pong}");
    }
}

static MCP: OnceLock<Mutex<Stdio_>> = OnceLock::new();

/// [`stop_serve`] for the shared `plughost mcp`.
extern "C" fn stop_mcp() {
    if let Some(mut mcp) = MCP.get().and_then(unpoisoned) {
        let _ = mcp.child.kill();
        let _ = mcp.child.wait();
        let _ = std::fs::remove_dir_all(mcp._dirs.0.path());
        let _ = std::fs::remove_dir_all(mcp._dirs.1.path());
    }
}

fn mcp_stdio() -> &'static Mutex<Stdio_> {
    MCP.get_or_init(|| {
        // SAFETY: as in `serve`.
        unsafe { libc::atexit(stop_mcp) };
        Mutex::new(Stdio_::start())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_lines_to_mcp_stdio_keep_the_session_in_step(
        value in json_value(),
        garbage in "[ -~]{0,80}",
        as_json in any::<bool>(),
    ) {
        let mut mcp = mcp_stdio().lock().unwrap_or_else(|e| e.into_inner());
        // Ids the fuzzer may reuse never collide with the pings'.
        let text = if as_json { value.to_string() } else { garbage };
        mcp.line(&text.replace('\n', " "));
        mcp.in_step();
    }
}
