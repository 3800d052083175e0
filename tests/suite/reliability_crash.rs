//! Issue 27 item 1: the default configuration survives a crashing plugin.
//! `plugins doctor` names a plugin whose `register()` segfaults instead of
//! dying with it; the start after a crash runs the plugin that caused it
//! isolated (the crash journal); `run`, `chat`, `plughost mcp` and `serve`
//! run third-party plugins isolated by default, so a segfaulting tool costs
//! only its call.
//! Every case runs the real binary under a wall-clock bound.
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(60);

/// `register()` segfaults.
const SEGV_REGISTER: &str = "import ctypes\ndef register(ctx):\n    ctypes.string_at(0)\n";
/// `register()` ends the process without a word.
const EXIT_REGISTER: &str = "import os\ndef register(ctx):\n    os._exit(7)\n";
/// A well-behaved plugin.
const FINE: &str = "def register(ctx):\n    ctx.register_tool('echo', {'type': 'object', 'properties': {'text': {'type': 'string'}}}, lambda text='': 'echo ' + text)\n";
/// A tool that segfaults, beside one that works.
const SEGV_TOOL: &str = "import ctypes\ndef register(ctx):\n    ctx.register_tool('boom', {'type': 'object'}, lambda: ctypes.string_at(0))\n";

fn home(plugins: &[(&str, &str)]) -> (tempfile::TempDir, tempfile::TempDir) {
    let keys: Vec<&str> = plugins.iter().map(|(k, _)| *k).collect();
    let home = common::home_with(&keys);
    for (key, source) in plugins {
        common::write_plugin(
            &home.path().join("plugins"),
            key,
            &format!("name: {key}\n"),
            &[("__init__.py", source)],
        );
    }
    (home, common::no_bundled())
}

fn plughost(home: &Path, bundled: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(home)
        .args(args)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .stdin(Stdio::null());
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn plugins_doctor_names_a_plugin_whose_register_crashes_instead_of_dying() {
    let (home, bundled) = home(&[
        ("segv", SEGV_REGISTER),
        ("quits", EXIT_REGISTER),
        ("fine", FINE),
    ]);
    let out = common::run_bounded(
        plughost(
            home.path(),
            bundled.path(),
            &["plugins", "doctor", "--json"],
        ),
        LIMIT,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("plugin 'segv' crashed plughost (SIGSEGV"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).expect(&stdout);
    let by_key = |key: &str| {
        report["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["key"] == key)
            .cloned()
            .unwrap()
    };
    let segv = by_key("segv");
    assert_eq!(segv["status"], "failed", "{segv}");
    assert!(
        segv["error"].as_str().unwrap().contains("SIGSEGV"),
        "{segv}"
    );
    let quits = by_key("quits");
    assert_eq!(quits["status"], "failed", "{quits}");
    assert!(
        quits["error"].as_str().unwrap().contains("exit code 7"),
        "{quits}"
    );
    assert_eq!(by_key("fine")["status"], "loaded");
    // The crashes are remembered: the next doctor needs no second try.
    let again = common::run_bounded(
        plughost(home.path(), bundled.path(), &["plugins", "doctor"]),
        LIMIT,
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(
        !text(&again.stderr).contains("checking again"),
        "{}",
        text(&again.stderr)
    );
}

#[test]
fn the_start_after_a_crash_in_register_runs_that_plugin_isolated() {
    let (home, bundled) = home(&[("segv", SEGV_REGISTER), ("fine", FINE)]);
    let list = || {
        common::run_bounded(
            plughost(home.path(), bundled.path(), &["tools", "list"]),
            LIMIT,
        )
    };
    let first = list();
    assert_eq!(
        first.status.code(),
        None,
        "the first start dies of the segfault"
    );
    let second = list();
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    assert!(
        text(&second.stdout).contains("echo"),
        "{}",
        text(&second.stdout)
    );
    assert!(
        stderr.contains("plugin 'segv' crashed plughost"),
        "{stderr}"
    );
    let listed = std::fs::read_to_string(home.path().join("crash-journal/isolated")).unwrap();
    assert!(listed.starts_with("segv\tregister()"), "{listed}");
}

/// One JSON-RPC exchange over `plughost mcp`'s stdio.
struct Mcp {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Mcp {
    fn start(mut cmd: Command) -> Mcp {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Mcp { child, lines }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The answer to request `id` (notifications and others skipped).
    fn answer(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(LIMIT)
                .expect("plughost mcp answered");
            let v: Value = serde_json::from_str(&line).expect(&line);
            if v["id"] == id {
                return v;
            }
        }
    }

    fn initialize(&mut self) {
        self.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
        );
        self.answer(0);
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        self.answer(id)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn plughost_mcp_outlives_a_tool_that_segfaults() {
    let (home, bundled) = home(&[("crashy", SEGV_TOOL), ("fine", FINE)]);
    let mut mcp = Mcp::start(plughost(home.path(), bundled.path(), &["mcp"]));
    mcp.initialize();
    let boom = mcp.call(1, "boom", json!({}));
    assert_eq!(boom["result"]["isError"], true, "{boom}");
    assert!(boom.to_string().contains("SIGSEGV"), "{boom}");
    let echo = mcp.call(2, "echo", json!({"text": "still here"}));
    assert!(echo.to_string().contains("echo still here"), "{echo}");
    // Told otherwise (plugins.trusted), a plugin runs in-process as before.
    let config = json!({"plugins": {"enabled": ["crashy", "fine"], "trusted": ["crashy"]}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let mut trusting = Mcp::start(plughost(home.path(), bundled.path(), &["mcp"]));
    trusting.initialize();
    trusting.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "boom", "arguments": {}}}));
    let status = common_wait(&mut trusting.child);
    assert_eq!(
        status.code(),
        None,
        "a trusted plugin's segfault is plughost's"
    );
}

fn common_wait(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the process did not end"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `run` with its defaults: a third-party plugin's segfault costs only its
/// tool call, from the first run on (issue 47 item 3).
#[test]
fn run_survives_a_tool_segfault_from_the_first_run() {
    let (home, bundled) = home(&[("crashy", SEGV_TOOL)]);
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: boom\n        args: {}\n  - say: \"Done: {tool_results}\"\n",
    )
    .unwrap();
    let out = common::run_bounded(
        plughost(
            home.path(),
            bundled.path(),
            &[
                "run",
                "--model",
                "scripted",
                "--script",
                script.to_str().unwrap(),
                "go",
            ],
        ),
        LIMIT,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("SIGSEGV"), "{stdout}");
    assert!(
        stderr.contains("plugin 'crashy' crashed (SIGSEGV)"),
        "{stderr}"
    );
}

/// A plugin the user trusts runs in-process: its segfault is plughost's,
/// and the start after it runs that plugin isolated (the crash journal).
#[test]
fn the_start_after_a_trusted_plugin_crashed_plughost_runs_it_isolated() {
    let (home, bundled) = home(&[("crashy", SEGV_TOOL)]);
    let config = json!({"plugins": {"enabled": ["crashy"], "trusted": ["crashy"]}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: boom\n        args: {}\n  - say: \"Done: {tool_results}\"\n",
    )
    .unwrap();
    let script = script.to_str().unwrap();
    let run = || {
        common::run_bounded(
            plughost(
                home.path(),
                bundled.path(),
                &["run", "--model", "scripted", "--script", script, "go"],
            ),
            LIMIT,
        )
    };
    assert_eq!(
        run().status.code(),
        None,
        "in-process, the segfault is plughost's"
    );
    let second = run();
    let (stdout, stderr) = (text(&second.stdout), text(&second.stderr));
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("SIGSEGV"), "{stdout}");
    assert!(stderr.contains("during tool 'boom'"), "{stderr}");
    assert!(stderr.contains("crashed plughost before"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_other_sessions_while_a_plugin_crashes_and_keeps_the_transcript() {
    let (home, bundled) = home(&[("crashy", SEGV_TOOL), ("fine", FINE)]);
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: boom\n        args: {}\n  - say: \"Done: {tool_results}\"\n",
    )
    .unwrap();
    let mut child = plughost(
        home.path(),
        bundled.path(),
        &[
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--script",
            script.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let url = common::serve_url(&mut child);
    let client = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let chat = |session: &'static str| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let r = client
                .post(format!("{url}/v1/chat/completions"))
                .header("x-plughost-session", session)
                .json(&json!({"model": "m", "messages": [{"role": "user", "content": "go"}]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // Two sessions at once, each crashing the plugin's worker.
    let (a, b) = tokio::join!(chat("alpha"), chat("beta"));
    for (status, body) in [&a, &b] {
        assert_eq!(*status, 200, "{body}");
        let reply = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(reply.contains("SIGSEGV"), "{reply}");
    }
    let health = client.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    for session in ["alpha", "beta"] {
        let transcript =
            std::fs::read_to_string(home.path().join(format!("sessions/{session}.jsonl"))).unwrap();
        assert!(transcript.contains("\"role\":\"tool\""), "{transcript}");
        assert!(transcript.contains("Done:"), "{transcript}");
    }
    let _ = child.kill();
    let _ = child.wait();
}
