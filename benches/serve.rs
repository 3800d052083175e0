//! Serving throughput and latency, against the real `plughost` binary.
//!
//! 1. `POST /v1/chat/completions` of `plughost serve` with the scripted
//!    model and one Python tool call per turn (two model iterations), at 1,
//!    16 and 64 concurrent clients: requests/s, p50 and p99.
//! 2. An MCP `tools/call` round trip of the same tool: on stdio
//!    (`plughost mcp`), over streamable HTTP (`/mcp`), and in process
//!    (`Host::call_tool`), for comparison.
//!
//! Run: `cargo bench --bench serve` (a release build).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PLUGIN: &str = "def register(ctx):\n    ctx.register_tool('greet', {'type': 'object', 'properties': {'name': {'type': 'string'}}}, lambda name='x': 'Hello, ' + name, description='Greet')\n";

const SCRIPT: &str = "turns:\n  - tool_calls:\n      - name: greet\n        args: {name: Ada}\n  - say: \"Done: {tool_results}\"\n";

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn start_serve(home: &Path, empty: &Path, script: &Path) -> (Reaped, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(script)
        .env("PLUGHOST_BUNDLED_DIR", empty)
        .env_remove("PLUGHOST_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Reaped(child);
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, url)
}

async fn chat_load(url: &str, clients: usize, per_client: usize) {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .unwrap();
    let endpoint = format!("{url}/v1/chat/completions");
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "greet"}]});
    // Warm up.
    for _ in 0..5 {
        http.post(&endpoint).json(&body).send().await.unwrap();
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, endpoint, body) = (http.clone(), endpoint.clone(), body.clone());
            tokio::spawn(async move {
                let mut took = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let t = Instant::now();
                    let r = http.post(&endpoint).json(&body).send().await.unwrap();
                    assert_eq!(r.status(), 200);
                    let v: Value = r.json().await.unwrap();
                    assert_eq!(v["choices"][0]["message"]["content"], "Done: Hello, Ada");
                    took.push(t.elapsed());
                }
                took
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed();
    all.sort();
    println!(
        "chat/completions  clients={clients:<3} requests={:<5} {:>8.1} req/s   p50 {:>7.2} ms   p99 {:>7.2} ms",
        all.len(),
        all.len() as f64 / wall.as_secs_f64(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
    );
}

fn report(label: &str, mut took: Vec<Duration>) {
    took.sort();
    let mean = took.iter().sum::<Duration>() / took.len() as u32;
    println!(
        "{label:<28} n={:<5} mean {:>7.3} ms   p50 {:>7.3} ms   p99 {:>7.3} ms",
        took.len(),
        ms(mean),
        ms(percentile(&took, 0.5)),
        ms(percentile(&took, 0.99)),
    );
}

const CALL: &str = r#"{"name": "greet", "arguments": {"name": "Ada"}}"#;

fn mcp_stdio(home: &Path, empty: &Path, calls: usize) -> Vec<Duration> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .arg("mcp")
        .env("PLUGHOST_BUNDLED_DIR", empty)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let _child = Reaped(child);
    let mut line = String::new();
    let mut rpc = |message: Value, answer: bool| -> Option<Value> {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if !answer {
            return None;
        }
        line.clear();
        stdout.read_line(&mut line).unwrap();
        Some(serde_json::from_str(&line).unwrap())
    };
    rpc(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}),
        true,
    );
    rpc(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    );
    let params: Value = serde_json::from_str(CALL).unwrap();
    let mut took = Vec::with_capacity(calls);
    for id in 1..=calls + 20 {
        let t = Instant::now();
        let answer = rpc(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
            true,
        )
        .unwrap();
        assert_eq!(answer["result"]["content"][0]["text"], "Hello, Ada");
        if id > 20 {
            took.push(t.elapsed());
        }
    }
    took
}

/// The JSON-RPC message of a streamable HTTP response (JSON or SSE).
fn message_of(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or(Value::Null)
}

async fn mcp_http(url: &str, calls: usize) -> Vec<Duration> {
    let http = reqwest::Client::new();
    let endpoint = format!("{url}/mcp");
    let init = http
        .post(&endpoint)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}))
        .send()
        .await
        .unwrap();
    let session = init
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let _ = init.text().await.unwrap();
    let with_session = |rb: reqwest::RequestBuilder| match &session {
        Some(s) => rb
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-06-18"),
        None => rb.header("mcp-protocol-version", "2025-06-18"),
    };
    with_session(http.post(&endpoint))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .unwrap();
    let params: Value = serde_json::from_str(CALL).unwrap();
    let mut took = Vec::with_capacity(calls);
    for id in 1..=calls + 20 {
        let t = Instant::now();
        let body = with_session(http.post(&endpoint))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let answer = message_of(&body);
        assert_eq!(
            answer["result"]["content"][0]["text"], "Hello, Ada",
            "{body}"
        );
        if id > 20 {
            took.push(t.elapsed());
        }
    }
    took
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    let plugin = home.join("plugins/greeter");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.yaml"), "name: greeter\n").unwrap();
    std::fs::write(plugin.join("__init__.py"), PLUGIN).unwrap();
    std::fs::write(
        home.join("config.json"),
        r#"{"plugins": {"enabled": ["greeter"]}}"#,
    )
    .unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let script = work.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();

    let (_server, url) = start_serve(&home, &empty, &script);
    rt.block_on(async {
        chat_load(&url, 1, 300).await;
        chat_load(&url, 16, 40).await;
        chat_load(&url, 64, 12).await;
    });

    let calls = 1000;
    report("mcp tools/call stdio", mcp_stdio(&home, &empty, calls));
    report("mcp tools/call http", rt.block_on(mcp_http(&url, calls)));
    let host = Arc::new(
        plughost::Host::builder()
            .home(&home)
            .bundled_dir(&empty)
            .build()
            .unwrap(),
    );
    let took = rt.block_on(async {
        let mut took = Vec::with_capacity(calls);
        for i in 0..calls + 20 {
            let t = Instant::now();
            let r = host
                .call_tool("greet", json!({"name": "Ada"}), "bench")
                .await;
            assert_eq!(r.text, "Hello, Ada");
            if i >= 20 {
                took.push(t.elapsed());
            }
        }
        took
    });
    report("in-process Host::call_tool", took);
}
