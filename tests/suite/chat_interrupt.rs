//! Ctrl-C (SIGINT) during a turn, sent to a real `plughost chat` and
//! `plughost run`: the turn is cancelled (the running tool sees
//! `asyncio.CancelledError`), Codumentor's `onTurnInterrupted` and Flowly's
//! `on_session_end(interrupted=True)` run without a `KeyboardInterrupt`,
//! and the transcript stays valid.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Codumentor: a handler for every way a turn ends, each writing its line.
const ENDINGS: &str = r#"
import os


def log(line):
    with open(os.path.join(os.environ["MARKS"], "codumentor.log"), "a") as f:
        f.write(line + "\n")


class Endings:
    meta = {"name": "endings"}

    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onTurnInterrupted", self.on_interrupted)
        bus.on("onTurnAborted", self.note("aborted"))
        bus.on("onError", self.note("error"))
        bus.on("onBeforeSendResponse", self.note("before_send"))
        bus.on("onResponsePersist", self.note("persist"))

    async def on_interrupted(self, agent, ctx, payload):
        log(f"interrupted {payload!r}")

    def note(self, name):
        async def handler(agent, ctx, payload):
            log(f"{name} {payload.get('assistant_text', '')}")
        return handler
"#;

/// Flowly: a slow tool that says when it started and when it was
/// cancelled, and `on_session_end` recording its flags.
const SLOW: &str = r#"
import asyncio, os

MARKS = os.environ["MARKS"]


def mark(name, text=""):
    with open(os.path.join(MARKS, name), "a") as f:
        f.write(text)


def register(ctx):
    async def slow(seconds: float = 60):
        mark("started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            mark("cancelled")
            raise
        return "slept"

    ctx.register_tool("slow", {"type": "object", "properties": {"seconds": {"type": "number"}}}, slow)

    def session_end(c):
        mark("session_end", f"completed={c.completed} interrupted={c.interrupted}\n")

    ctx.register_hook("on_session_end", session_end)
"#;

const SCRIPT: &str = r#"
turns:
  - say: "Sleeping."
    tool_calls:
      - name: slow
        args: {seconds: 60}
  - say: "second answer"
"#;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
    marks: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
            marks: tempfile::tempdir().unwrap(),
        };
        let plugins = env.home.path().join("plugins");
        write(&plugins.join("slow/plugin.yaml"), "name: slow\n");
        write(&plugins.join("slow/__init__.py"), SLOW);
        write(
            &plugins.join("endings/plugin.yaml"),
            "name: endings\ndialect: codumentor\nentry: endings_pkg:Endings\n",
        );
        write(
            &plugins.join("endings/backend/endings_pkg/__init__.py"),
            ENDINGS,
        );
        write(
            &env.home.path().join("config.json"),
            r#"{"plugins": {"enabled": ["slow", "endings"]}}"#,
        );
        write(&env.script(), SCRIPT);
        env
    }

    fn script(&self) -> PathBuf {
        self.home.path().join("script.yaml")
    }

    fn mark(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.marks.path().join(name)).ok()
    }

    /// `plughost <args> --model scripted --script …`, SIGINT at its default
    /// disposition (a test runner started in the background may ignore it,
    /// and an ignored SIGINT would hide what Python does with it).
    fn spawn(&self, args: &[&str]) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .args(["--model", "scripted", "--script"])
            .arg(self.script())
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("MARKS", self.marks.path())
            .env("HERMES_HOME", self.home.path().join("no-hermes"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: runs in the forked child before exec; signal() is
        // async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        Proc(cmd.spawn().unwrap())
    }

    /// Wait until the slow tool runs, then Ctrl-C the process.
    fn interrupt_when_started(&self, child: &Proc) {
        wait_for(|| self.mark("started").is_some(), "the slow tool to start");
        // SAFETY: kill() with a pid we spawned and have not reaped.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
    }

    fn transcript(&self, session: &str) -> Vec<Value> {
        std::fs::read_to_string(
            self.home
                .path()
                .join("sessions")
                .join(format!("{session}.jsonl")),
        )
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
    }
}

/// A child process killed (and reaped) if the test fails before it ends.
struct Proc(Child);

impl std::ops::Deref for Proc {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Wait for the end; its exit status, stdout and stderr.
    fn finish(&mut self) -> (std::process::ExitStatus, String, String) {
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    pipe.read_to_string(&mut text).unwrap();
                }
                text
            })
        };
        let out = read(self.0.stdout.take().map(|p| Box::new(p) as _));
        let err = read(self.0.stderr.take().map(|p| Box::new(p) as _));
        let status = self.0.wait().unwrap();
        (status, out.join().unwrap(), err.join().unwrap())
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn wait_for(mut done: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "gave up waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every line the child writes to `out`, as it comes.
fn lines(out: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Read `rx` until a line contains `needle`; the lines read.
fn read_until(rx: &Receiver<String>, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(RecvTimeoutError::Timeout) => panic!("no '{needle}' within 60 s: {seen:#?}"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("output ended before '{needle}': {seen:#?}")
            }
        }
    }
}

/// The address `plughost serve` announces on stderr.
fn serve_url(stderr: &Receiver<String>) -> String {
    let seen = read_until(stderr, "listening on ");
    seen.last()
        .unwrap()
        .split("listening on ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A runtime whose thread sends a request while the test's waits.
fn one_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn send_line(stdin: &mut ChildStdin, line: &str) {
    writeln!(stdin, "{line}").unwrap();
    stdin.flush().unwrap();
}

/// Every tool call is answered by one tool message right after its
/// assistant message, and every tool message answers a call.
fn assert_valid(transcript: &[Value]) {
    let mut open: Vec<String> = Vec::new();
    for (i, m) in transcript.iter().enumerate() {
        match m["role"].as_str().unwrap() {
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap().to_string();
                assert!(
                    open.contains(&id),
                    "message {i} answers no open call: {transcript:#?}"
                );
                open.retain(|o| *o != id);
            }
            role => {
                assert!(
                    open.is_empty(),
                    "message {i} ({role}) follows unanswered calls {open:?}: {transcript:#?}"
                );
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    open.push(call["id"].as_str().unwrap().to_string());
                }
            }
        }
    }
    assert!(
        open.is_empty(),
        "unanswered calls {open:?}: {transcript:#?}"
    );
}

/// Nothing in stderr says a plugin failed or saw the Ctrl-C.
fn assert_no_plugin_error(stderr: &str) {
    for bad in ["KeyboardInterrupt", "Traceback", "failed", "ERROR"] {
        assert!(!stderr.contains(bad), "stderr has '{bad}':\n{stderr}");
    }
}

#[test]
fn ctrl_c_in_chat_cancels_the_turn_and_the_chat_goes_on() {
    let env = Env::new();
    let mut child = env.spawn(&["chat", "--session", "c"]);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = lines(child.stdout.take().unwrap());

    send_line(&mut stdin, "go");
    env.interrupt_when_started(&child);
    read_until(&stdout, "(turn cancelled)");
    // The running tool sees the cancellation as asyncio.CancelledError (on
    // the asyncio loop's thread, soon after the turn has ended).
    wait_for(
        || env.mark("cancelled").is_some(),
        "the tool's CancelledError",
    );

    // The chat goes on: the next line gets the next answer.
    send_line(&mut stdin, "again");
    read_until(&stdout, "second answer");
    drop(stdin); // Ctrl-D ends the chat.
    let (status, _, stderr) = child.finish();
    assert!(status.success(), "{status:?}\n{stderr}");
    assert_no_plugin_error(&stderr);

    // Codumentor: onTurnInterrupted with `{}`, and nothing else for that
    // turn; the second turn ends normally with the response hooks.
    assert_eq!(
        env.mark("codumentor.log")
            .unwrap()
            .lines()
            .collect::<Vec<_>>(),
        [
            "interrupted {}",
            "before_send second answer",
            "persist second answer"
        ]
    );
    // Flowly: on_session_end(interrupted=True), then a completed turn.
    assert_eq!(
        env.mark("session_end").unwrap(),
        "completed=False interrupted=True\ncompleted=True interrupted=False\n"
    );
    let transcript = env.transcript("c");
    assert_valid(&transcript);
    let contents: Vec<&str> = transcript
        .iter()
        .filter(|m| m["role"] != "tool")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(contents, ["go", "Sleeping.", "again", "second answer"]);
}

#[test]
fn ctrl_c_in_run_cancels_the_turn_and_exits_130() {
    let env = Env::new();
    let mut child = env.spawn(&["run", "--json", "--session", "r", "go"]);
    drop(child.stdin.take());
    env.interrupt_when_started(&child);
    let (status, stdout, stderr) = child.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert_no_plugin_error(&stderr);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["ended_by"], "interrupted", "{report:#}");
    assert_eq!(report["interrupted"], true, "{report:#}");
    assert_eq!(report["completed"], false, "{report:#}");
    assert_eq!(report["hook_errors"], serde_json::json!([]), "{report:#}");
    assert_eq!(env.mark("codumentor.log").unwrap(), "interrupted {}\n");
    assert_eq!(
        env.mark("session_end").unwrap(),
        "completed=False interrupted=True\n"
    );
    let transcript = env.transcript("r");
    assert_valid(&transcript);
    assert_eq!(transcript.len(), 3, "{transcript:#?}");
    assert_eq!(transcript[2]["role"], "tool");

    // Without --json: the same cancellation, said on stderr.
    let env = Env::new();
    let mut child = env.spawn(&["run", "go"]);
    drop(child.stdin.take());
    env.interrupt_when_started(&child);
    let (status, stdout, stderr) = child.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("plughost: interrupted (Ctrl-C); the turn was cancelled"),
        "{stderr}"
    );
    assert_eq!(stdout, "");
}

/// `plughost serve`: Ctrl-C is its shutdown signal. A turn still running
/// after the grace period is cancelled the same way, without a
/// `KeyboardInterrupt` reaching the plugins.
#[test]
fn ctrl_c_stops_serve_and_cancels_its_running_turn() {
    let env = Env::new();
    let mut child = env.spawn(&["serve", "--port", "0", "--shutdown-grace", "0.2"]);
    drop(child.stdin.take());
    let stderr = lines(child.stderr.take().unwrap());
    let url = serve_url(&stderr);
    // A worker thread sends the request while this one waits for the tool.
    let rt = one_thread_runtime();
    let request = rt.spawn(async move {
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .header("x-plughost-session", "srv")
            .json(
                &serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "go"}]}),
            )
            .send()
            .await
            .unwrap();
        r.status().as_u16()
    });
    env.interrupt_when_started(&child);
    assert_eq!(rt.block_on(request).unwrap(), 503);
    let status = child.wait().unwrap();
    let rest: Vec<String> = stderr.iter().collect();
    let rest = rest.join("\n");
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("plughost serve: stopped"), "{rest}");
    assert_no_plugin_error(&rest);
    assert_eq!(env.mark("codumentor.log").unwrap(), "interrupted {}\n");
    assert_eq!(
        env.mark("session_end").unwrap(),
        "completed=False interrupted=True\n"
    );
}

/// A sync tool (the worker runs it on its reading thread) that says it
/// started, then waits for the test's go-ahead.
const GATED: &str = r#"
import os, time

MARKS = os.environ["MARKS"]


def register(ctx):
    def slow(seconds: float = 60):
        open(os.path.join(MARKS, "started"), "a").close()
        for _ in range(3000):
            if os.path.exists(os.path.join(MARKS, "release")):
                return "released"
            time.sleep(0.02)
        return "never released"

    ctx.register_tool("slow", {"type": "object", "properties": {"seconds": {"type": "number"}}}, slow)
"#;

/// A Ctrl-C at the terminal reaches the whole process group, isolated
/// plugins' workers included. plughost owns it: `serve` lets its running
/// turn finish within the grace period, and the isolated tool it is
/// waiting for is not killed by the same key.
#[test]
fn a_terminal_ctrl_c_leaves_isolated_workers_to_plughost() {
    let env = Env::new();
    let plugins = env.home.path().join("plugins");
    write(&plugins.join("slow/__init__.py"), GATED);
    write(
        &env.home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["slow", "endings"], "isolate": ["slow"]}}"#,
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["serve", "--port", "0", "--shutdown-grace", "60"])
        .args(["--model", "scripted", "--script"])
        .arg(env.script())
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env("MARKS", env.marks.path())
        .env("HERMES_HOME", env.home.path().join("no-hermes"))
        .env_remove("PLUGHOST_LOG")
        .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, as a shell gives a foreground job.
        .process_group(0);
    // SAFETY: runs in the forked child before exec; signal() is
    // async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = Proc(cmd.spawn().unwrap());
    let stderr = lines(child.stderr.take().unwrap());
    let url = serve_url(&stderr);
    let rt = one_thread_runtime();
    let request = rt.spawn(async move {
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .json(
                &serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "go"}]}),
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap())
    });
    wait_for(
        || env.mark("started").is_some(),
        "the isolated tool to start",
    );
    let group = child.id() as libc::pid_t;
    // SAFETY: kill() of the process group of a child we spawned and have
    // not reaped (it leads the group).
    let sent = unsafe { libc::kill(-group, libc::SIGINT) };
    assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
    // serve has heard it (it stops taking requests) before the tool goes on.
    read_until(&stderr, "shutting down");
    write(&env.marks.path().join("release"), "");
    let (status, body) = rt.block_on(request).unwrap();
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(
        body["choices"][0]["message"]["content"], "second answer",
        "{body:#}"
    );
    let status = child.wait().unwrap();
    let rest: Vec<String> = stderr.iter().collect();
    let rest = rest.join("\n");
    assert_eq!(status.code(), Some(0), "{rest}");
    assert_no_plugin_error(&rest);
    assert!(!rest.contains("crashed"), "{rest}");
}
