//! `plughost serve` against hostile or unlucky clients (issue 51): each
//! case starts a real server on loopback and shows the bound holds by what
//! the server did (an answer, an exit, a count of descriptors), with a wall
//! time limit only so that a broken server fails the test instead of
//! hanging it.
use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A script for the scripted model: every turn one short answer, no tool.
const ECHO_SCRIPT: &str = "turns:\n  - say: \"ok {user_message}\"\nafter_end: \"ok\"\n";

/// A Felix plugin with routes: a streamed one that produces without end
/// (noting each chunk it made, and when its generator is closed), one that
/// reads a body, and a self-authenticating mount that never reads its body.
const ROUTES: &str = r#"
import asyncio, os
LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "web.log")

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")

class Web:
    name = "web"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        from fastapi import APIRouter, Request
        from fastapi.responses import StreamingResponse

        router = APIRouter()

        @router.get("/hooks/flood")
        async def flood():
            async def chunks():
                made = 0
                try:
                    while True:
                        made += 1
                        if made % 64 == 0:
                            note(f"made {made}")
                        yield b"x" * 65536
                finally:
                    note(f"closed after {made}")
            return StreamingResponse(chunks(), media_type="application/octet-stream")

        @router.post("/web/echo")
        async def echo(request: Request):
            body = await request.body()
            return {"len": len(body)}

        @router.post("/hooks/incoming")
        async def incoming(request: Request):
            body = await request.body()
            return {"len": len(body)}

        app.include_router(router)

    @property
    def self_authenticating_mounts(self):
        return ("/hooks",)

    @property
    def body_limit_bytes(self):
        return 3_000_000

def register(registry):
    registry.register_plugin(Web())
"#;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    /// A home with no plugins.
    fn plain() -> Env {
        let home = common::home_with(&[]);
        std::fs::write(home.path().join("echo.yaml"), ECHO_SCRIPT).unwrap();
        Env {
            home,
            bundled: common::no_bundled(),
        }
    }

    /// A trusted home with the [`ROUTES`] Felix plugin.
    fn routes() -> Env {
        common::require_fastapi();
        let home = common::trusted_home(&["web"]);
        common::felix_tree(home.path(), "web", ROUTES);
        std::fs::write(home.path().join("echo.yaml"), ECHO_SCRIPT).unwrap();
        Env {
            home,
            bundled: common::no_bundled(),
        }
    }

    fn serve(&self, more: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.arg("--home")
            .arg(self.home.path())
            .args(["serve", "--port", "0", "--model", "scripted", "--script"])
            .arg(self.home.path().join("echo.yaml"))
            .args(more)
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("PLUGHOST_HOME_FOR_TEST", self.home.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PYTHONPATH")
            .env_remove("PLUGHOST_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("web.log")).unwrap_or_default()
    }
}

/// A started server, killed and reaped when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `cmd` and read its address; the rest of standard error is drained.
fn start(cmd: Command) -> Server {
    let (server, stderr) = start_keeping_stderr(cmd);
    std::thread::spawn(move || {
        let mut stderr = stderr;
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
    });
    server
}

/// Start `cmd`; its address, and its standard error after the address line.
fn start_keeping_stderr(mut cmd: Command) -> (Server, BufReader<std::process::ChildStderr>) {
    let mut child = cmd.spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut server = Server {
        child,
        addr: String::new(),
    };
    let mut line = String::new();
    while server.addr.is_empty() {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve ended before it listened"
        );
        if let Some(rest) = line.split("listening on http://").nth(1) {
            server.addr = rest.split_whitespace().next().unwrap().to_string();
        }
    }
    (server, stderr)
}

/// One HTTP/1.1 exchange on a connection of its own (`Connection: close`):
/// the status and the body. Fails the test past `limit`.
fn exchange(
    addr: &str,
    head: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    limit: Duration,
) -> (u16, Vec<u8>) {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(limit)).unwrap();
    tcp.set_write_timeout(Some(limit)).unwrap();
    let mut request = format!("{head} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    tcp.write_all(request.as_bytes()).unwrap();
    // A server may answer (413) before it read the whole body.
    let _ = tcp.write_all(body);
    let mut answer = Vec::new();
    if let Err(e) = tcp.read_to_end(&mut answer) {
        assert!(
            !answer.is_empty(),
            "no answer to {head} within {limit:?}: {e}"
        );
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer to {head}: {text:?}"));
    let at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |p| p + 4);
    (status, answer[at..].to_vec())
}

fn chat(addr: &str, session: Option<&str>, content: &str) -> (u16, serde_json::Value) {
    let body =
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": content}]})
            .to_string();
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(s) = session {
        headers.push(("X-Plughost-Session", s));
    }
    let (status, body) = exchange(
        addr,
        "POST /v1/chat/completions",
        &headers,
        body.as_bytes(),
        Duration::from_secs(60),
    );
    (
        status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: sends a signal to our own child process by its id; no memory is involved.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0);
}

/// Wait for `child` to exit, at most `limit`: its status, or `None`.
fn exited_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `plughost serve --port P 2>&1 | head -1`: the log's reader takes the
/// address line and goes away. SIGTERM (and SIGINT) must still stop the
/// server, cleanly: the first log line of the shutdown failed to be
/// written, and tracing-subscriber's report of that failure (an
/// `eprintln!` on the same closed stderr) panicked the task that was
/// to stop the server.
#[test]
fn serve_stops_on_a_signal_when_its_stderr_pipe_is_closed() {
    let env = Env::plain();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (mut server, stderr) = start_keeping_stderr(env.serve(&[]));
        drop(stderr);
        // Serving still (it writes nothing on a healthy request).
        let (status, _) = exchange(
            &server.addr,
            "GET /healthz",
            &[],
            b"",
            Duration::from_secs(30),
        );
        assert_eq!(status, 200);
        signal(&server.child, sig);
        let status =
            exited_within(&mut server.child, Duration::from_secs(30)).unwrap_or_else(|| {
                panic!("serve went on running after signal {sig} with its stderr pipe closed")
            });
        assert_eq!(status.code(), Some(0), "signal {sig}: {status:?}");
    }
}

/// `--max-body-bytes` bounds plughost's own endpoints whatever a plugin
/// declares: a plugin's `body_limit_bytes` (3 MB here) raises the limit
/// of its own routes only.
#[test]
fn a_plugin_body_limit_raises_only_its_own_routes() {
    let env = Env::routes();
    let server = start(env.serve(&["--max-body-bytes", "100000"]));
    let big = vec![b' '; 300_000];
    let limit = Duration::from_secs(60);
    let (status, _) = exchange(
        &server.addr,
        "POST /v1/chat/completions",
        &[("Content-Type", "application/json")],
        &big,
        limit,
    );
    assert_eq!(status, 413, "the chat endpoint took a 300 kB body");
    let (status, _) = exchange(
        &server.addr,
        "POST /mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        &big,
        limit,
    );
    assert_eq!(status, 413, "the MCP endpoint took a 300 kB body");
    // The plugin's own route takes it (its limit is 3 MB) …
    let (status, body) = exchange(&server.addr, "POST /web/echo", &[], &big, limit);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["len"], 300_000);
    // … and refuses past it.
    let huge = vec![b' '; 3_100_000];
    let (status, _) = exchange(&server.addr, "POST /web/echo", &[], &huge, limit);
    assert_eq!(status, 413);
}

/// Open descriptors of process `pid` (Linux).
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The soft and hard limits of open descriptors of process `pid`.
fn nofile(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let mut words = line.split_whitespace().skip(3);
    (
        words.next().unwrap().to_string(),
        words.next().unwrap().to_string(),
    )
}

/// Set the child's open-descriptor limits (soft, hard) before it runs.
fn with_nofile(cmd: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls setrlimit, which is async-signal-safe, on a local struct.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// 1,100 named sessions under `ulimit -n 1024` (soft and hard, so raising
/// the soft limit cannot help): every one answers, and the server holds
/// no descriptor per idle session (it held one transcript file open per
/// session for `--session-idle`, and the 1,000th or so got 502 "Too many
/// open files").
#[test]
fn eleven_hundred_named_sessions_fit_under_1024_descriptors() {
    let env = Env::plain();
    let mut cmd = env.serve(&[]);
    with_nofile(&mut cmd, 1024, 1024);
    let server = start(cmd);
    let pid = server.child.id();
    let at_start = descriptors(pid);
    let addr = server.addr.clone();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                for i in (w..1100).step_by(4) {
                    let (status, body) = chat(&addr, Some(&format!("s{i}")), "hi");
                    assert_eq!(status, 200, "session s{i}: {body}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let after = descriptors(pid);
    assert!(
        after < at_start + 50,
        "{after} descriptors open after 1,100 sessions ({at_start} at start)"
    );
    // Each session goes on from its transcript.
    let (status, body) = chat(&addr, Some("s7"), "again");
    assert_eq!(status, 200);
    assert!(body.to_string().contains("ok"), "{body}");
}

/// `serve` raises its soft descriptor limit to the hard one at start.
#[test]
fn serve_raises_its_soft_descriptor_limit_to_the_hard_one() {
    let env = Env::plain();
    let mut cmd = env.serve(&[]);
    with_nofile(&mut cmd, 256, 4096);
    let server = start(cmd);
    assert_eq!(
        nofile(server.child.id()),
        ("4096".to_string(), "4096".to_string())
    );
}

/// The number in the last `made N` line of the plugin's log.
fn made(log: &str) -> usize {
    log.lines()
        .filter_map(|l| l.strip_prefix("made "))
        .filter_map(|n| n.parse().ok())
        .next_back()
        .unwrap_or(0)
}

/// The resident memory of process `pid`, in kB.
fn resident_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// A client that stops reading a streamed plugin route (anonymous, on a
/// self-authenticating mount) stalls the route's generator: the server
/// holds a few chunks of it, not all it can make (it buffered 1.7 to 8.3
/// GB in 5 s). Reading again resumes it; going away closes it.
#[test]
fn a_client_that_stops_reading_a_streamed_route_stalls_its_producer() {
    let env = Env::routes();
    let server = start(env.serve(&[]));
    let pid = server.child.id();
    let resident_before = resident_kb(pid);
    let mut tcp = TcpStream::connect(&server.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        tcp,
        "GET /hooks/flood HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).unwrap();
    assert_eq!(&head[9..12], b"200");
    // It made some (64 chunks of 64 KiB) and then stops, as the client does
    // not read: the count no longer moves.
    common::wait_until(
        "the route to start producing",
        Duration::from_secs(60),
        || made(&env.log()) >= 64,
    );
    let mut last = made(&env.log());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_millis(1500));
        let now = made(&env.log());
        if now == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the producer never stalled ({now} chunks)"
        );
        last = now;
    }
    // 64 KiB chunks: the socket buffers on loopback, a few chunks queued.
    assert!(
        last <= 64 * 8,
        "{last} chunks of 64 KiB made for a client that reads none"
    );
    let grown = resident_kb(pid).saturating_sub(resident_before);
    assert!(grown < 200_000, "the server grew by {grown} kB");
    // Reading again resumes the producer.
    let mut sink = vec![0u8; 1 << 20];
    let mut read = 0;
    while read < 64 << 20 {
        read += tcp.read(&mut sink).unwrap();
    }
    common::wait_until("the producer to resume", Duration::from_secs(60), || {
        made(&env.log()) > last
    });
    // Going away closes the generator.
    drop(tcp);
    common::wait_until(
        "the generator to be closed",
        Duration::from_secs(60),
        || env.log().contains("closed after"),
    );
}

/// 20 connections trickling request bodies to a self-authenticating mount
/// of a server that serves 16 at once: at most half the slots go to such
/// anonymous requests, the rest get 503 at once (their connection closes),
/// and `/healthz` and the chat endpoint answer meanwhile. (The issue's
/// case is 560 against 512; the flag scales it down.)
#[test]
fn trickling_bodies_to_an_open_mount_cannot_take_every_connection_slot() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let env = Env::routes();
    let server = start(env.serve(&["--max-connections", "16", "--api-key", "k"]));
    let stop = Arc::new(AtomicBool::new(false));
    let answers: Arc<Mutex<Vec<u16>>> = Arc::default();
    let mut held = Vec::new();
    for _ in 0..20 {
        let tcp = TcpStream::connect(&server.addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut writer = tcp.try_clone().unwrap();
        let (stop, addr) = (stop.clone(), server.addr.clone());
        std::thread::spawn(move || {
            let _ = write!(
                writer,
                "POST /hooks/incoming HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            while !stop.load(Ordering::Relaxed) {
                if writer.write_all(b"1\r\nx\r\n").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let answers = answers.clone();
        let mut reader = tcp.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut head = [0u8; 12];
            if reader.read_exact(&mut head).is_ok() {
                let status = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
                answers.lock().unwrap().push(status);
            }
        });
        held.push(tcp);
    }
    // Half of the 16 slots at most go to them: 12 are refused.
    common::wait_until(
        "12 of the trickling requests to be refused",
        Duration::from_secs(60),
        || {
            answers
                .lock()
                .unwrap()
                .iter()
                .filter(|s| **s == 503)
                .count()
                >= 12
        },
    );
    let limit = Duration::from_secs(30);
    let (status, body) = exchange(&server.addr, "GET /healthz", &[], b"", limit);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let request =
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            .to_string();
    let (status, body) = exchange(
        &server.addr,
        "POST /v1/chat/completions",
        &[
            ("Authorization", "Bearer k"),
            ("Content-Type", "application/json"),
        ],
        request.as_bytes(),
        limit,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    // Meanwhile the 8 admitted ones were still trickling, unanswered.
    assert_eq!(
        answers.lock().unwrap().len(),
        12,
        "{:?}",
        answers.lock().unwrap()
    );
    stop.store(true, Ordering::Relaxed);
}

/// Two servers (two replicas behind one balancer) never answer the same
/// completion id: each was `chatcmpl-1`, `chatcmpl-2`, … on its own.
#[test]
fn two_servers_never_answer_the_same_completion_id() {
    let env = Env::plain();
    let (a, b) = (start(env.serve(&[])), start(env.serve(&[])));
    let ids: Vec<String> = [&a, &b, &a, &b]
        .iter()
        .map(|s| {
            let (status, body) = chat(&s.addr, None, "hi");
            assert_eq!(status, 200, "{body}");
            body["id"].as_str().unwrap().to_string()
        })
        .collect();
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 4, "{ids:?}");
    assert!(ids.iter().all(|id| id.starts_with("chatcmpl-")), "{ids:?}");
}
