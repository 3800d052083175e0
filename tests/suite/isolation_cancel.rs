//! Issue 47 item 2, no shared fate: under `plughost serve`, ten sessions
//! call a slow tool of one isolated plugin; one client hangs up (a real
//! HTTP connection closed mid-request) and one call runs past
//! `--tool-timeout`. Only those two calls are cancelled in the worker
//! (async handler: its task gets `CancelledError`; sync handler: its
//! thread is left to run, its late answer dropped); the eight others,
//! in flight on the same worker process all along, finish with their
//! results. Proven by the plugin's own events (order and process ids),
//! never by wall-clock bounds.
//!
//! And a worker that does not acknowledge a cancel (its GIL held by a C
//! call) is replaced, its calls in flight told so with a typed outcome.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const COMMON: &str = r#"
import asyncio, os, time

HOME = os.environ["PLUGHOST_HOME_FOR_TEST"]
LOG = os.path.join(HOME, "events.log")
GO = os.path.join(HOME, "go")
RELEASE = os.path.join(HOME, "release")
VICTIMS = ("hangup", "timeout")

def note(line):
    with open(LOG, "a") as f:
        f.write(f"{line} pid={os.getpid()}\n")
"#;

const SYNC: &str = r#"
def slow(who: str = ""):
    note(f"start {who}")
    # The victims wait for the test's release (long after plughost gave
    # up on them: their threads are abandoned, not stopped); the others
    # for the go, written once both victims were given up on.
    gate = RELEASE if who in VICTIMS else GO
    while not os.path.exists(gate):
        time.sleep(0.01)
    note(f"{'late' if who in VICTIMS else 'end'} {who}")
    return f"slow {who} pid {os.getpid()}"

def register(ctx):
    ctx.register_tool("slow", {"type": "object", "properties": {"who": {"type": "string"}}}, slow, description="Slow")
    ctx.register_hook("on_session_end", lambda c: note(f"session-end {c.session_id} {c.interrupted}"))
"#;

const ASYNC: &str = r#"
async def slow(who: str = ""):
    note(f"start {who}")
    try:
        if who in VICTIMS:
            await asyncio.sleep(3600)
        while not os.path.exists(GO):
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        note(f"cancelled {who}")
        raise
    note(f"end {who}")
    return f"slow {who} pid {os.getpid()}"

def register(ctx):
    ctx.register_tool("slow", {"type": "object", "properties": {"who": {"type": "string"}}}, slow, description="Slow")
    ctx.register_hook("on_session_end", lambda c: note(f"session-end {c.session_id} {c.interrupted}"))
"#;

/// The sessions whose calls must finish.
const OTHERS: [&str; 8] = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"];

/// `--tool-timeout`: the timed-out call starts this long before the
/// others' calls, which therefore stay inside their own limit while they
/// wait for the go (a scheduling choice; nothing is asserted on time).
const TOOL_TIMEOUT_S: u64 = 6;

const BOUND: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    url: String,
    home: tempfile::TempDir,
    _bundled: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Lets abandoned sync threads end before the worker is killed.
        let _ = std::fs::write(self.home.path().join("release"), "");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(handler: &str) -> Server {
    let home = common::home_with(&["slowpoke"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "slowpoke",
        "name: slowpoke\nversion: 0.1.0\n",
        &[("__init__.py", &format!("{COMMON}{handler}"))],
    );
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: slow\n        args: {who: \"{user_message}\"}\n  - say: \"done: {tool_results}\"\n",
    )
    .unwrap();
    let bundled = common::no_bundled();
    let timeout = TOOL_TIMEOUT_S.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(&script)
        .args(["--tool-timeout", &timeout])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("PLUGHOST_HOME_FOR_TEST", home.path())
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = common::serve_url(&mut child);
    Server {
        child,
        url,
        home,
        _bundled: bundled,
    }
}

fn body(who: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": who}]})
}

fn post(url: &str, who: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let (url, who) = (url.to_string(), who.to_string());
    tokio::spawn(async move {
        let r = reqwest::Client::builder()
            .timeout(BOUND)
            .build()
            .unwrap()
            .post(format!("{url}/v1/chat/completions"))
            .header("x-plughost-session", &who)
            .json(&body(&who))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    })
}

/// A client that sends its request and will hang up (drop the stream).
fn hanging_client(url: &str, who: &str) -> TcpStream {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    let payload = body(who).to_string();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nx-plughost-session: {who}\r\ncontent-length: {}\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    s
}

/// The plugin's events: (what, who, pid), in the order written.
fn events(home: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(home.join("events.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (
                parts[0].to_string(),
                parts.get(1).unwrap_or(&"").to_string(),
                parts.last().unwrap().trim_start_matches("pid=").to_string(),
            )
        })
        .collect()
}

fn position(events: &[(String, String, String)], what: &str, who: &str) -> Option<usize> {
    events.iter().position(|(w, s, _)| w == what && s == who)
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn one_caller_bad_luck_is_its_own(handler: &str, sync: bool) {
    let server = start(handler);
    let home: PathBuf = server.home.path().to_path_buf();
    let started = |who: &'static str| {
        let home = home.clone();
        move || position(&events(&home), "start", who).is_some()
    };
    // The call that will time out goes first...
    let timeout = post(&server.url, "timeout");
    wait_for("the timeout call to start", started("timeout")).await;
    // ...half its limit before the others, which thus stay inside theirs.
    tokio::time::sleep(Duration::from_secs(TOOL_TIMEOUT_S / 2)).await;
    let others: Vec<_> = OTHERS.iter().map(|who| post(&server.url, who)).collect();
    let hangup = hanging_client(&server.url, "hangup");
    wait_for("every call to start", || {
        let ev = events(&home);
        OTHERS
            .iter()
            .chain(&["hangup"])
            .all(|who| position(&ev, "start", who).is_some())
    })
    .await;
    // The client hangs up: serve cancels its turn, which ends (interrupted).
    drop(hangup);
    wait_for("the hung-up session to end", || {
        position(&events(&home), "session-end", "hangup").is_some()
    })
    .await;
    // The timed-out call: its turn goes on with the timeout as the result.
    let (status, answer) = timeout.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        text.contains("timed out") && !text.contains("abandoned"),
        "{answer}"
    );
    if !sync {
        wait_for("both victims' tasks to be cancelled in the worker", || {
            let ev = events(&home);
            position(&ev, "cancelled", "hangup").is_some()
                && position(&ev, "cancelled", "timeout").is_some()
        })
        .await;
    }
    // Both victims were given up on while the others were in flight.
    std::fs::write(home.join("go"), "").unwrap();
    let mut pids = Vec::new();
    for (who, call) in OTHERS.iter().zip(others) {
        let (status, answer) = call.await.unwrap();
        assert_eq!(status, 200, "{who}: {answer}");
        let text = answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        let expected = format!("done: slow {who} pid ");
        assert!(text.starts_with(&expected), "{who}: {answer}");
        pids.push(text[expected.len()..].trim().to_string());
    }
    let ev = events(&home);
    let worker = &position(&ev, "start", "timeout")
        .map(|at| ev[at].2.clone())
        .unwrap();
    assert_ne!(
        worker,
        &server.child.id().to_string(),
        "the plugin is isolated"
    );
    // One worker process served every call, before and after the victims.
    assert!(
        pids.iter().all(|p| p == worker),
        "{pids:?} vs {worker}: {ev:?}"
    );
    assert!(ev.iter().all(|(_, _, pid)| pid == worker), "{ev:?}");
    let go_seen = |who: &str| position(&ev, "end", who).unwrap();
    for who in OTHERS {
        // In flight when the victims were given up on: started before,
        // ended after (the go came after both).
        let start = position(&ev, "start", who).unwrap();
        assert!(
            start < position(&ev, "session-end", "hangup").unwrap(),
            "{ev:?}"
        );
        let end = go_seen(who);
        assert!(start < end, "{ev:?}");
        if !sync {
            for victim in ["hangup", "timeout"] {
                let cancelled = position(&ev, "cancelled", victim).unwrap();
                assert!(start < cancelled && cancelled < end, "{ev:?}");
            }
        }
    }
    if sync {
        // The victims' threads were abandoned, not stopped: they finish
        // once released, in the same worker, and nobody hears of it.
        std::fs::write(home.join("release"), "").unwrap();
        wait_for("the abandoned threads to finish", || {
            let ev = events(&home);
            position(&ev, "late", "hangup").is_some() && position(&ev, "late", "timeout").is_some()
        })
        .await;
    } else {
        assert!(position(&ev, "end", "hangup").is_none(), "{ev:?}");
        assert!(position(&ev, "end", "timeout").is_none(), "{ev:?}");
    }
    // The worker still serves: a new session's call, same process.
    std::fs::remove_file(home.join("go")).unwrap();
    std::fs::write(home.join("go"), "").unwrap();
    let (status, answer) = post(&server.url, "after").await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text, format!("done: slow after pid {worker}"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_handler_a_timeout_and_a_hang_up_cost_only_their_own_calls() {
    one_caller_bad_luck_is_its_own(SYNC, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn async_handler_a_timeout_and_a_hang_up_cancel_only_their_own_tasks() {
    one_caller_bad_luck_is_its_own(ASYNC, false).await;
}

const WEDGING: &str = r#"
import ctypes, os, time

HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def note(line):
    with open(os.path.join(HOME, "events.log"), "a") as f:
        f.write(f"{line} pid={os.getpid()}\n")

def slow():
    note("start slow")
    while True:
        time.sleep(0.01)

def wedge():
    note("start wedge")
    # A C call through PyDLL keeps the GIL: the interpreter is held for good.
    ctypes.PyDLL(None).sleep(3600)

def register(ctx):
    ctx.register_tool("slow", {}, slow)
    ctx.register_tool("wedge", {}, wedge)
    ctx.register_tool("pid", {}, lambda: str(os.getpid()))
"#;

/// A worker that cannot acknowledge a cancel (a plugin holds its GIL) is
/// replaced; the call in flight on it is told so with a typed outcome
/// (`PluginFault::Wedged`), not "abandoned past its time limit".
#[test]
fn a_wedged_worker_is_replaced_and_its_calls_are_told_so() {
    use plughost::core::outcome::PluginFault;
    let home = common::home_with(&["wedger"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "wedger",
        "name: wedger\nversion: 0.1.0\n",
        &[("__init__.py", WEDGING)],
    );
    let bundled = common::no_bundled();
    let host = plughost::Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .worker_command(plughost::isolation::WorkerCommand::binary(env!(
            "CARGO_BIN_EXE_plughost"
        )))
        .isolate(plughost::plugins::config::Isolation::All)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let host = std::sync::Arc::new(host);
    let before = rt.block_on(host.call_tool("pid", json!({}), "")).text;
    let in_flight = {
        let host = host.clone();
        rt.spawn(async move { host.call_tool("slow", json!({}), "").await })
    };
    rt.block_on(wait_for("the slow call to start", || {
        position(&events(home.path()), "start", "slow").is_some()
    }));
    // Given up on at once: its cancel cannot be acknowledged.
    let wedged = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(300),
            host.call_tool("wedge", json!({}), ""),
        )
        .await
    });
    assert!(wedged.is_err(), "the wedge cannot finish");
    let r = rt.block_on(in_flight).unwrap();
    let fault = r.outcome.error().and_then(|e| e.fault.as_deref().cloned());
    assert!(
        matches!(fault, Some(PluginFault::Wedged { ref plugin, .. }) if plugin == "wedger"),
        "{fault:?}: {}",
        r.text
    );
    assert!(r.text.contains("stopped responding"), "{}", r.text);
    let after = rt.block_on(host.call_tool("pid", json!({}), "")).text;
    assert_ne!(before, after, "a new worker serves the next call");
    let ev = events(home.path());
    assert!(position(&ev, "start", "wedge").is_some(), "{ev:?}");
}
