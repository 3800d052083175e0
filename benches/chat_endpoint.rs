//! `/v1/chat/completions` of `plughost serve` with its defaults (the
//! bundled plugins on; the third-party `greet` plugin isolated in a worker,
//! as `serve` runs third-party plugins) against a FastAPI peer
//! (`benches/chat_peer.py`), side by side in one run (issue 26, item 1).
//! A third server, `plughost serve --isolate none` ("in-proc"), shows what
//! the worker's round trip costs; the target is on the defaults.
//!
//! Both serve the same plugin tool (`greet`) with the same scripted model:
//! one tool call, then the answer quoting its result (two model
//! iterations a request). At 1, 16 and 64 clients each server gets
//! `ROUNDS` timed rounds, alternating which goes first; each figure is the
//! median over the rounds (requests/s, p50, p99), so a busy machine slows
//! both alike. The target: plughost ≥ 2× the peer's requests/s with a p99
//! no higher than the peer's.
//!
//! The clients are threads with a kept-alive connection each, speaking
//! HTTP/1.1 over a plain socket (`RawClient`), so what is timed is the
//! servers rather than a client library.
//!
//! `PLUGHOST_BENCH_PYTHON` is the interpreter with fastapi and uvicorn
//! (`benches/run_all.sh` makes that venv); without it only plughost runs.
//! `PLUGHOST_BENCH_SECONDS` sets a round's length (default 2).
//! `PLUGHOST_BENCH_BUNDLED_DIR` runs plughost on another copy of the
//! bundled plugins; `PLUGHOST_BENCH_CLIENTS` (e.g. `16`) runs one level.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PLUGIN: &str = "def register(ctx):\n    ctx.register_tool('greet', {'type': 'object', 'properties': {'name': {'type': 'string'}}}, lambda name='x': 'Hello, ' + name, description='Greet')\n";

const SCRIPT: &str = "turns:\n  - tool_calls:\n      - name: greet\n        args: {name: Ada}\n  - say: \"Done: {tool_results}\"\n";

const ROUNDS: usize = 3;
const TARGET_RATE: f64 = 2.0;

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_plughost(home: &Path, script: &Path, isolate: Option<&str>) -> (Reaped, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home").arg(home);
    if let Some(isolate) = isolate {
        cmd.args(["--isolate", isolate]);
    }
    cmd.args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(script)
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("PLUGHOST_BUNDLED_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(dir) = std::env::var_os("PLUGHOST_BENCH_BUNDLED_DIR") {
        cmd.env("PLUGHOST_BUNDLED_DIR", dir);
    }
    let mut child = cmd.spawn().expect("plughost serve starts");
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

fn start_peer(python: &str, plugin: &Path) -> (Reaped, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let child = Command::new(python)
        .arg(here.join("benches/chat_peer.py"))
        .arg(plugin)
        .arg(here.join("python/plughost/_compat"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the peer starts");
    (Reaped(child), format!("http://127.0.0.1:{port}"))
}

/// A keep-alive HTTP/1.1 client of one connection, as small as a client
/// can be: the request is written once and sent as bytes, the answer read
/// by its `Content-Length`. A general client (reqwest on a tokio runtime)
/// added about 0.5 ms to every request on this machine, on both sides
/// alike, which at one client hid most of the servers' difference.
struct RawClient {
    addr: String,
    request: Vec<u8>,
    stream: Option<BufReader<TcpStream>>,
}

impl RawClient {
    fn new(url: &str) -> RawClient {
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let body = body().to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
        RawClient {
            addr,
            request,
            stream: None,
        }
    }

    /// One request: its status and body. Reconnects when the server closed
    /// the kept-alive connection.
    fn send(&mut self) -> std::io::Result<(u16, Vec<u8>)> {
        for attempt in 0..2 {
            if self.stream.is_none() {
                let s = TcpStream::connect(&self.addr)?;
                s.set_nodelay(true)?;
                self.stream = Some(BufReader::new(s));
            }
            match self.exchange() {
                Ok(answer) => return Ok(answer),
                Err(_) if attempt == 0 => self.stream = None,
                Err(e) => return Err(e),
            }
        }
        unreachable!()
    }

    fn exchange(&mut self) -> std::io::Result<(u16, Vec<u8>)> {
        let stream = self.stream.as_mut().unwrap();
        stream.get_mut().write_all(&self.request)?;
        let mut line = String::new();
        if stream.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {line:?}")))?;
        let mut length = None;
        let mut close = false;
        loop {
            line.clear();
            stream.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let (name, value) = (name.trim(), value.trim());
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("connection")
                    && value.eq_ignore_ascii_case("close")
                {
                    close = true;
                }
            }
        }
        let length =
            length.ok_or_else(|| std::io::Error::other("an answer without Content-Length"))?;
        let mut body = vec![0; length];
        stream.read_exact(&mut body)?;
        if close {
            self.stream = None;
        }
        Ok((status, body))
    }

    /// One chat request, its answer checked.
    fn one(&mut self) {
        let (status, body) = self.send().expect("the server answers");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Done: Hello, Ada");
    }
}

/// Wait until `url` answers a chat request (the peer starts in the
/// background), then warm it up.
fn ready(url: &str) {
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut client = RawClient::new(url);
    loop {
        if let Ok((200, _)) = client.send() {
            break;
        }
        client.stream = None;
        assert!(Instant::now() < give_up, "{url} did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..50 {
        client.one();
    }
}

fn body() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "greet"}]})
}

/// One timed round: requests/s, p50 and p99 in ms.
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    rate: f64,
    p50: f64,
    p99: f64,
}

/// `clients` threads, each with its own kept-alive connection, sending
/// one request after another until the round ends.
fn round(url: &str, clients: usize, length: Duration) -> Round {
    let started = Instant::now();
    let deadline = started + length;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let mut client = RawClient::new(url);
            std::thread::spawn(move || {
                let mut took = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    client.one();
                    took.push(t.elapsed());
                }
                took
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.join().unwrap());
    }
    let wall = started.elapsed();
    all.sort();
    let at = |p: f64| all[((all.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    Round {
        rate: all.len() as f64 / wall.as_secs_f64(),
        p50: at(0.5),
        p99: at(0.99),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn summary(rounds: &[Round]) -> Round {
    Round {
        rate: median(rounds.iter().map(|r| r.rate).collect()),
        p50: median(rounds.iter().map(|r| r.p50).collect()),
        p99: median(rounds.iter().map(|r| r.p99).collect()),
    }
}

fn print(label: &str, clients: usize, r: Round) {
    println!(
        "chat/completions {label:<9} clients={clients:<3} {:>8.1} req/s   p50 {:>7.2} ms   p99 {:>7.2} ms",
        r.rate, r.p50, r.p99
    );
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
    let script = work.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let length = Duration::from_secs_f64(
        std::env::var("PLUGHOST_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0),
    );
    let levels: Vec<usize> = match std::env::var("PLUGHOST_BENCH_CLIENTS") {
        Ok(s) => s.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![1, 16, 64],
    };

    let (_plughost, ph_url) = start_plughost(&home, &script, None);
    let (_inproc, in_url) = start_plughost(&home, &script, Some("none"));
    let python = std::env::var("PLUGHOST_BENCH_PYTHON").ok();
    let peer = python.as_deref().map(|p| start_peer(p, &plugin));
    ready(&ph_url);
    ready(&in_url);
    if let Some((_, url)) = &peer {
        ready(url);
    }
    if peer.is_none() {
        println!("(PLUGHOST_BENCH_PYTHON unset: no FastAPI peer; benches/run_all.sh sets it)");
    }
    for &clients in &levels {
        let (mut ours, mut inproc, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..ROUNDS {
            let peer_first = i % 2 == 1;
            if let (true, Some((_, url))) = (peer_first, &peer) {
                theirs.push(round(url, clients, length));
            }
            ours.push(round(&ph_url, clients, length));
            inproc.push(round(&in_url, clients, length));
            if let (false, Some((_, url))) = (peer_first, &peer) {
                theirs.push(round(url, clients, length));
            }
        }
        let ours = summary(&ours);
        let inproc = summary(&inproc);
        print("plughost", clients, ours);
        print("in-proc", clients, inproc);
        if !theirs.is_empty() {
            let theirs = summary(&theirs);
            print("fastapi", clients, theirs);
            let (rate, p99) = (ours.rate / theirs.rate, ours.p99 / theirs.p99);
            let met = if rate >= TARGET_RATE && p99 <= 1.0 {
                "met"
            } else {
                "MISSED"
            };
            println!(
                "ratio chat clients={clients:<3} req/s {rate:.2}× (target ≥ {TARGET_RATE}×)   p99 {p99:.2}× (target ≤ 1×)   {met}"
            );
            println!(
                "ratio chat clients={clients:<3} in-proc (--isolate none, not the default) req/s {:.2}×   p99 {:.2}×",
                inproc.rate / theirs.rate,
                inproc.p99 / theirs.p99
            );
        }
    }
}
