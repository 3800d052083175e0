//! `plughost serve` as a process: refusal to listen beyond loopback
//! without a key, bearer auth, the body limit, `/healthz` and `/metrics`,
//! and shutdown on SIGTERM (in-flight turns finish within the grace
//! period, or are cancelled after it; sessions are finalized).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const KEY: &str = "s3cret-key";

/// A plugin with a tool, a hook that raises on one input, and session
/// hooks that append what they saw to `events.log` in the home.
const PLUGIN: &str = r#"
import asyncio, os

LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "events.log")

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")

def register(ctx):
    async def nap(seconds: float = 0.1):
        note(f"nap-start {seconds}")
        await asyncio.sleep(seconds)
        note(f"nap-end {seconds}")
        return f"napped {seconds}"
    ctx.register_tool("nap", {"type": "object", "properties": {"seconds": {"type": "number"}}}, nap, description="Sleep a while")
    def guard(c):
        if c.params.get("seconds") == 0.123:
            raise RuntimeError("the hook failed")
    ctx.register_hook("pre_tool_call", guard)
    ctx.register_hook("on_session_end", lambda c: note(f"end {c.session_id} {c.completed}/{c.interrupted}"))
    ctx.register_hook("on_session_finalize", lambda c: note(f"finalize {c.session_id}"))
"#;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
    script: PathBuf,
}

/// A home with the plugin and a script whose first turn naps `seconds`.
fn env(seconds: f64) -> Env {
    let home = common::home_with(&["napper"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "napper",
        "name: napper\nversion: 0.1.0\n",
        &[("__init__.py", PLUGIN)],
    );
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        format!(
            "turns:\n  - say: \"napping\"\n    tool_calls:\n      - name: nap\n        args: {{seconds: {seconds}}}\n  - say: \"Done: {{tool_results}}\"\n"
        ),
    )
    .unwrap();
    Env {
        home,
        bundled: common::no_bundled(),
        script,
    }
}

fn command(env: &Env, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(env.home.path())
        .args(args)
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env("PLUGHOST_HOME_FOR_TEST", env.home.path())
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

struct Server {
    child: Child,
    url: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The rest of standard error, once the process has exited.
    fn rest_of_stderr(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }
}

fn start(env: &Env, extra: &[&str]) -> Server {
    let script = env.script.to_str().unwrap();
    let mut args = vec![
        "serve", "--port", "0", "--model", "scripted", "--script", script,
    ];
    args.extend_from_slice(extra);
    let mut child = command(env, &args).spawn().unwrap();
    let stderr = child.stderr.take();
    let (tx, rx) = std::sync::mpsc::channel();
    // Owned by the Server from here on: dropped, it kills and reaps the child.
    let mut server = Server {
        child,
        url: String::new(),
        stderr: rx,
    };
    std::thread::spawn(move || {
        let Some(stderr) = stderr else { return };
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.url.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = server
            .stderr
            .recv_timeout(left)
            .expect("plughost serve printed its address");
        if let Some(rest) = line.split("listening on ").nth(1) {
            server.url = rest.split_whitespace().next().unwrap().to_string();
        }
    }
    server
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn chat_body(content: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": content}]})
}

fn log(env: &Env) -> String {
    std::fs::read_to_string(env.home.path().join("events.log")).unwrap_or_default()
}

fn sigterm(child: &Child) {
    // SAFETY: sends a signal to our own child process by its id; no memory is involved.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
}

fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "plughost serve did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn listening_beyond_loopback_without_a_key_is_refused() {
    let env = env(0.1);
    let out = command(&env, &["serve", "--host", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0") && err.contains("--api-key"),
        "{err}"
    );

    let out = command(&env, &["serve", "--port", "0"])
        .env("PLUGHOST_API_KEY", " ")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PLUGHOST_API_KEY is empty"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_required_everywhere_but_healthz() {
    let env = env(0.1);
    let server = start(&env, &["--api-key", KEY]);
    let c = client();
    let healthz = c
        .get(format!("{}/healthz", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);
    for path in ["/v1/models", "/metrics", "/mcp"] {
        let none = c.get(format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(none.status(), 401, "{path}");
        assert_eq!(none.headers()["www-authenticate"], "Bearer");
        let body: Value = none.json().await.unwrap();
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing API key"));
        let wrong = c
            .get(format!("{}{path}", server.url))
            .bearer_auth("nope")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{path}");
    }
    let wrong_chat = c
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth("nope")
        .json(&chat_body("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_chat.status(), 401);
    assert!(!log(&env).contains("nap-start"), "no turn ran");
    let models = c
        .get(format!("{}/v1/models", server.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    let models: Value = models.json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "plughost:scripted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_limit_and_bad_requests_are_refused_with_the_reason() {
    let env = env(0.1);
    let server = start(&env, &["--max-body-bytes", "2048"]);
    let c = client();
    let big = chat_body(&"x".repeat(10_000));
    let refused = c
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 413);
    let mcp_big = c
        .post(format!("{}/mcp", server.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(big.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(mcp_big.status(), 413);

    let cases = [
        ("{not json".to_string(), "not valid JSON"),
        (
            json!({"model": "m"}).to_string(),
            "\"messages\" is required",
        ),
        (json!({"messages": []}).to_string(), "\"messages\" is empty"),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}).to_string(),
            "has role 'wizard'",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).to_string(),
            "only text parts",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}).to_string(),
            "\"stream\" must be true or false",
        ),
    ];
    for (body, expected) in cases {
        let r = c
            .post(format!("{}/v1/chat/completions", server.url))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{body}: {message}");
    }
    let bad_session = c
        .post(format!("{}/v1/chat/completions", server.url))
        .header("x-plughost-session", "   ")
        .json(&chat_body("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_session.status(), 400);
    // A name too long to store once escaped is refused, never folded.
    let unstorable = c
        .post(format!("{}/v1/chat/completions", server.url))
        .header("x-plughost-session", "/".repeat(100))
        .json(&chat_body("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(unstorable.status(), 400);
    let v: Value = unstorable.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("too long to store"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_an_mcp_session_answers_200_as_the_official_servers_do() {
    let env = env(0.0);
    let server = start(&env, &[]);
    let c = client();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    let r = c
        .post(format!("{}/mcp", server.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let ended = c
        .delete(format!("{}/mcp", server.url))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    // Ended: a request in it is refused.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let after = c
        .post(format!("{}/mcp", server.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .body(list.to_string())
        .send()
        .await
        .unwrap();
    assert!(after.status().is_client_error(), "{}", after.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_tool_calls_and_hook_errors() {
    let env = env(0.123);
    let server = start(&env, &[]);
    let c = client();
    let reply: Value = c
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&chat_body("nap"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "Done: napped 0.123"
    );
    assert_eq!(reply["plughost"]["tool_calls"][0]["outcome"], "ok");
    let _ = c
        .get(format!("{}/nowhere", server.url))
        .send()
        .await
        .unwrap();
    let text = c
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "plughost_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "plughost_http_requests_total{route=\"other\",status=\"404\"} 1",
        "plughost_tool_calls_total{via=\"chat\",outcome=\"ok\"} 1",
        "plughost_agent_turns_total{result=\"completed\"} 1",
        "plughost_hook_errors_total{plugin=\"napper\",event=\"pre_tool_call\"} 1",
        "plughost_http_request_duration_seconds_count{route=\"/v1/chat/completions\"} 1",
        "# TYPE plughost_tool_call_duration_seconds histogram",
    ] {
        assert!(text.contains(line), "missing {line} in:\n{text}");
    }
    // The request's session ended, was finalized, and left no transcript.
    let log = log(&env);
    assert!(
        log.contains("end api-") && log.contains("finalize api-"),
        "{log}"
    );
    let sessions = env.home.path().join("sessions");
    let left: Vec<_> = std::fs::read_dir(&sessions)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

fn post_in_background(
    url: &str,
    body: Value,
    session: &str,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let (url, session) = (url.to_string(), session.to_string());
    tokio::spawn(async move {
        let r = client()
            .post(format!("{url}/v1/chat/completions"))
            .header("x-plughost-session", session)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    })
}

fn nap_started(env: &Env) -> bool {
    log(env).contains("nap-start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_in_flight_turn_finish_then_finalizes_sessions() {
    let env = env(0.5);
    let mut server = start(&env, &["--shutdown-grace", "30"]);
    let request = post_in_background(&server.url, chat_body("nap"), "kept");
    wait_for("the tool to start", || nap_started(&env)).await;
    sigterm(&server.child);
    let (status, body) = request.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Done: napped 0.5");
    assert_eq!(wait_exit(&mut server.child, Duration::from_secs(30)), 0);
    let log = log(&env);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "nap-start 0.5",
            "nap-end 0.5",
            "end kept True/False",
            "finalize kept"
        ],
        "{log}"
    );
    assert!(server.rest_of_stderr().contains("plughost serve: stopped"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_a_turn_still_running_after_the_grace_period() {
    let env = env(60.0);
    let mut server = start(&env, &["--shutdown-grace", "0.2"]);
    let request = post_in_background(&server.url, chat_body("nap"), "cut");
    wait_for("the tool to start", || nap_started(&env)).await;
    sigterm(&server.child);
    let (status, body) = request.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cancelled"));
    assert_eq!(wait_exit(&mut server.child, Duration::from_secs(30)), 0);
    let log = log(&env);
    assert!(!log.contains("nap-end"), "{log}");
    assert!(log.contains("end cut False/True"), "{log}");
    assert!(log.contains("finalize cut"), "{log}");
    // The transcript answers the cancelled call, so the session can go on.
    let transcript = std::fs::read_to_string(env.home.path().join("sessions/cut.jsonl")).unwrap();
    assert!(transcript.contains("\"role\":\"tool\""), "{transcript}");
}

/// Session hooks and the size of each model call's conversation, noted
/// in `events.log` of the home, each line ending ` @<monotonic seconds>`.
const IDLE_PLUGIN: &str = r#"
import asyncio, os, time

LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "events.log")

def note(line):
    with open(LOG, "a") as f:
        f.write(f"{line} @{time.monotonic()}\n")

def register(ctx):
    async def nap(seconds: float = 0.1):
        note("nap-start")
        await asyncio.sleep(seconds)
        note("nap-end")
        return f"napped {seconds}"
    ctx.register_tool("nap", {"type": "object", "properties": {"seconds": {"type": "number"}}}, nap, description="Sleep a while")
    ctx.register_hook("on_session_start", lambda c: note(f"start {c.session_id}"))
    ctx.register_hook("pre_llm_call", lambda c: note(f"llm {len(c.messages)}"))
    ctx.register_hook("on_session_end", lambda c: note(f"end {c.session_id}"))
    ctx.register_hook("on_session_finalize", lambda c: note(f"finalize {c.session_id}"))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_named_sessions_are_finalized_never_mid_turn_and_resumed_from_disk() {
    let home = common::home_with(&["idler"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "idler",
        "name: idler\n",
        &[("__init__.py", IDLE_PLUGIN)],
    );
    let script = home.path().join("script.yaml");
    // The first turn naps three times the idle time: eviction must wait.
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: nap\n        args: {seconds: 0.6}\n  - say: \"Done: {tool_results}\"\n  - say: \"again: {user_message}\"\n",
    )
    .unwrap();
    let env = Env {
        home,
        bundled: common::no_bundled(),
        script,
    };
    let finalized = |env: &Env| log(env).matches("finalize idle").count();
    // The log's lines without their times, and the time of a line.
    let events = |env: &Env| -> Vec<(String, f64)> {
        log(env)
            .lines()
            .map(|l| {
                let (event, at) = l.rsplit_once(" @").unwrap();
                (event.to_string(), at.parse().unwrap())
            })
            .collect()
    };

    // A bad value names the flag's rule.
    let out = command(&env, &["serve", "--port", "0", "--session-idle", "-1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--session-idle") && said.contains("0: never evict"),
        "{said}"
    );

    let mut server = start(&env, &["--session-idle", "0.2"]);
    let (status, body) = post_in_background(&server.url, chat_body("first"), "idle")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Done: napped 0.6");
    // Evicted once idle: its session-end finalization ran.
    wait_for("the idle session's finalization", || finalized(&env) == 1).await;
    let first = events(&env);
    let hooks: Vec<&(String, f64)> = first
        .iter()
        .filter(|(e, _)| !e.starts_with("llm "))
        .collect();
    let names: Vec<&str> = hooks.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "start idle",
            "nap-start",
            "nap-end",
            "end idle",
            "finalize idle"
        ],
        "never while its turn ran: {first:?}"
    );
    // Idle is counted from the end of the turn, not from its start (the
    // turn alone lasted three times the idle time).
    assert!(hooks[4].1 - hooks[3].1 >= 0.2, "{first:?}");

    // The same name again: the conversation goes on from its transcript.
    let (status, body) = post_in_background(&server.url, chat_body("second"), "idle")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "again: second");
    let sizes: Vec<usize> = events(&env)
        .iter()
        .filter_map(|(e, _)| e.strip_prefix("llm ")?.parse().ok())
        .collect();
    // Turn one: [user] then [user, call, result]; turn two adds the answer
    // and the new user message to what was on disk.
    assert_eq!(sizes.len(), 3, "{sizes:?}");
    assert_eq!(sizes[2], sizes[0] + 4, "{sizes:?}");
    wait_for("the second finalization", || finalized(&env) == 2).await;

    // Shutdown finalizes nothing twice: the session is no longer loaded.
    sigterm(&server.child);
    assert_eq!(wait_exit(&mut server.child, Duration::from_secs(30)), 0);
    let log = log(&env);
    assert_eq!(log.matches("finalize idle").count(), 2, "{log}");
    assert_eq!(
        log.matches("start idle").count(),
        1,
        "resumed, not restarted: {log}"
    );
}

/// Close `tcp` with a reset (SO_LINGER 0), as a client that crashed or
/// timed out does: the server's next write to it fails with EPIPE.
fn reset(tcp: std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: sets one option on a socket this function owns; the option
    // value is a valid `linger` whose size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    drop(tcp);
}

/// Clients that reset their connection mid-request end only their own
/// connection: the server answered each (its write then fails) and serves
/// the next request. Before, hyper's `writev` to the reset socket raised
/// SIGPIPE, whose default action (restored by the CLI) ended the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resetting_mid_request_ends_only_its_connection() {
    use std::io::Write;
    let env = env(0.0);
    let mut server = start(&env, &[]);
    let addr = server.url.trim_start_matches("http://").to_string();
    for _ in 0..3 {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        // A body shorter than it says: the server's read of it fails at the reset.
        tcp.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
            .unwrap();
        reset(tcp);
    }
    let client = client();
    let answered = |metrics: &str| {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("plughost_http_requests_total{route=\"/v1/chat/completions\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = client
            .get(format!("{}/metrics", server.url))
            .send()
            .await
            .expect("the server is still up")
            .text()
            .await
            .unwrap();
        if answered(&metrics) >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resets were never answered: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let chat = client
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&chat_body("hello"))
        .send()
        .await
        .expect("the server is still up after the resets");
    assert_eq!(chat.status(), 200);
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "plughost serve ended: {}",
        server.rest_of_stderr()
    );
}
