//! A message through the messaging gateway against the same turn over
//! `/v1/chat/completions`, per message, in one run (issue 49). One
//! `plughost serve --isolate none` runs the Hermes platform plugin of the
//! gateway tests (`tests/suite/gateway_common/`), connected to a small chat
//! service on loopback here. Each turn is the same: the scripted model
//! calls the plugin's `lookup` tool, then answers quoting it.
//!
//! Gateway: the time from the service writing a user's message to the
//! adapter's connection until the reply arrives back (the tool progress
//! message comes in between, as a chat shows it). HTTP: one request with a
//! kept-alive connection and the session header, until its response.
//! `ROUNDS` rounds of `PLUGHOST_BENCH_MESSAGES` (default 100) messages, one
//! at a time, alternating which transport goes first; each figure is the
//! median over the rounds of the per-message p50 and p99.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const ADAPTER: &str = include_str!("../tests/suite/gateway_common/adapter.py");
const PLUGIN: &str = include_str!("../tests/suite/gateway_common/plugin.py");
const MANIFEST: &str = "name: fakechat-platform\nlabel: FakeChat\nkind: platform\nversion: 1.0.0\n";
const ROUNDS: usize = 3;

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The chat service: one client (the adapter); replies are reported on a
/// channel with their arrival time.
struct Service {
    client: TcpStream,
    replies: mpsc::Receiver<(String, Instant)>,
}

fn service(listener: TcpListener) -> Service {
    let (client, _) = listener.accept().unwrap();
    client.set_nodelay(true).unwrap();
    let mut writer = client.try_clone().unwrap();
    let (tx, replies) = mpsc::channel();
    let reader = BufReader::new(client.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut next = 0u64;
        for line in reader.lines() {
            let Ok(line) = line else { break };
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["op"] == "hello" {
                continue;
            }
            next += 1;
            let ack =
                json!({"op": "ack", "req": v["req"], "message_id": format!("s{next}"), "ok": true});
            if writer.write_all(format!("{ack}\n").as_bytes()).is_err() {
                break;
            }
            let text = v["text"].as_str().unwrap_or_default();
            if v["op"] == "send" && text.starts_with("re: ") {
                let _ = tx.send((text.to_string(), Instant::now()));
            }
        }
    });
    Service { client, replies }
}

/// One message through the gateway: its round trip.
fn through_gateway(s: &mut Service, chat: &str, n: usize) -> Duration {
    let text = format!("word{n}");
    let msg = json!({"op": "msg", "chat_id": chat, "chat_type": "dm", "user": chat, "text": text, "id": format!("m{n}")});
    let started = Instant::now();
    s.client.write_all(format!("{msg}\n").as_bytes()).unwrap();
    let (reply, at) = s
        .replies
        .recv_timeout(Duration::from_secs(60))
        .expect("no reply");
    assert!(reply.starts_with(&format!("re: {text} ")), "{reply}");
    at - started
}

/// One request over HTTP on a kept-alive connection: its round trip.
fn over_http(conn: &mut BufReader<TcpStream>, session: &str, n: usize) -> Duration {
    let body = json!({"model": "x", "messages": [{"role": "user", "content": format!("word{n}")}]})
        .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-plughost-session: {session}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let started = Instant::now();
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut answer = vec![0; length];
    conn.read_exact(&mut answer).unwrap();
    let took = started.elapsed();
    let v: Value = serde_json::from_slice(&answer).unwrap();
    let reply = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(reply.starts_with(&format!("re: word{n} ")), "{v}");
    took
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn main() {
    let messages: usize = std::env::var("PLUGHOST_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let (home, hermes) = (dir.path().join("home"), dir.path().join("hermes"));
    let plugin = home.join("plugins/fakechat");
    write(&plugin.join("plugin.yaml"), MANIFEST);
    write(&plugin.join("__init__.py"), PLUGIN);
    write(&plugin.join("adapter.py"), ADAPTER);
    write(
        &home.join("config.json"),
        r#"{"plugins": {"enabled": ["fakechat-platform"], "disabled": []}}"#,
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    write(
        &hermes.join("config.yaml"),
        &format!("platforms:\n  fakechat:\n    enabled: true\n    extra:\n      port: {port}\n"),
    );
    // Every turn: the tool call, then the answer quoting its result.
    let mut script = String::from("turns:\n");
    for _ in 0..(messages * ROUNDS + 1) {
        script.push_str("  - tool_calls:\n      - name: lookup\n        args: {q: \"{user_message}\"}\n  - say: \"re: {user_message} {tool_results}\"\n");
    }
    write(&dir.path().join("script.yaml"), &script);
    let bundled = dir.path().join("bundled");
    std::fs::create_dir_all(&bundled).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(&home)
        .args([
            "--isolate",
            "none",
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--script",
        ])
        .arg(dir.path().join("script.yaml"))
        .env("HERMES_HOME", &hermes)
        .env("PLUGHOST_BUNDLED_DIR", &bundled)
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("GATEWAY_TEST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let server = Reaped(child);
    let mut lines = stderr.lines();
    let url = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .trim_start_matches("http://")
                .to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let mut chat = service(listener);
    let mut http = BufReader::new(TcpStream::connect(&url).unwrap());
    http.get_ref().set_nodelay(true).unwrap();
    // Warm-up: each transport's first turn.
    through_gateway(&mut chat, "warm", 0);
    over_http(&mut http, "warm", 0);
    let (mut gw, mut api) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let mut run = |gateway: bool| {
            let mut took: Vec<Duration> = (1..=messages)
                .map(|n| {
                    let n = round * messages + n;
                    if gateway {
                        through_gateway(&mut chat, "bench", n)
                    } else {
                        over_http(&mut http, "bench-api", n)
                    }
                })
                .collect();
            took.sort();
            (percentile(&took, 0.5), percentile(&took, 0.99))
        };
        let (g, a) = if round % 2 == 0 {
            let g = run(true);
            (g, run(false))
        } else {
            let a = run(false);
            (run(true), a)
        };
        gw.push(g);
        api.push(a);
    }
    let p = |v: &[(f64, f64)], i: usize| {
        median(v.iter().map(|x| if i == 0 { x.0 } else { x.1 }).collect())
    };
    println!("gateway vs /v1/chat/completions, one message at a time ({messages} per round, {ROUNDS} rounds, medians)");
    println!("{:<26} {:>9} {:>9}", "transport", "p50 ms", "p99 ms");
    println!(
        "{:<26} {:>9.2} {:>9.2}",
        "gateway (fakechat)",
        p(&gw, 0),
        p(&gw, 1)
    );
    println!(
        "{:<26} {:>9.2} {:>9.2}",
        "/v1/chat/completions",
        p(&api, 0),
        p(&api, 1)
    );
    println!("gateway / http p50 ratio: {:.2}", p(&gw, 0) / p(&api, 0));
    drop(server);
}
