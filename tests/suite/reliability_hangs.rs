//! Issue 27 item 2: every wait is bounded, exit included. A sync tool that
//! never returns is abandoned so `run`, `chat` (end of input), `mcp`
//! (stdin closed) and `serve` (SIGTERM) exit; `--hook-timeout` bounds sync
//! hooks of every event; `register()` has a load deadline; a FIFO named
//! `config.json` is refused. Each case runs the real binary, in-process
//! (`--isolate none`: the hard case), under a wall-clock bound.
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

/// `stuck` never returns (blocked in C), `spin` loops in Python forever.
const HANGING: &str = r#"
import time, os
def spin(*a, **k):
    while True:
        pass
def register(ctx):
    ctx.register_tool("stuck", {"type": "object"}, lambda: time.sleep(100000))
    ctx.register_tool("spin", {"type": "object"}, spin)
    ev = os.environ.get("HANG_EVENT")
    if ev:
        ctx.register_hook(ev, spin)
    if os.environ.get("HANG_REGISTER"):
        spin()
"#;

const ECHO: &str =
    "def register(ctx):\n    ctx.register_tool('echo', {'type': 'object'}, lambda: 'echo')\n";

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

fn env(tool: &str) -> Env {
    let home = common::home_with(&["hanging", "fine"]);
    let plugins = home.path().join("plugins");
    common::write_plugin(
        &plugins,
        "hanging",
        "name: hanging\n",
        &[("__init__.py", HANGING)],
    );
    common::write_plugin(&plugins, "fine", "name: fine\n", &[("__init__.py", ECHO)]);
    std::fs::write(
        home.path().join("script.yaml"),
        format!("turns:\n  - tool_calls:\n      - name: {tool}\n        args: {{}}\n  - say: \"Done: {{tool_results}}\"\n"),
    )
    .unwrap();
    Env {
        home,
        bundled: common::no_bundled(),
    }
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.arg("--home")
            .arg(self.home.path())
            .args(["--isolate", "none"])
            .args(args)
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env_remove("PLUGHOST_LOG")
            .stdin(Stdio::null());
        cmd
    }

    fn script(&self) -> String {
        self.home.path().join("script.yaml").display().to_string()
    }

    fn agent(&self, command: &str, extra: &[&str]) -> Command {
        let script = self.script();
        let mut args = vec![command, "--model", "scripted", "--script", &script];
        args.extend_from_slice(extra);
        self.cmd(&args)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn run_and_chat_exit_with_a_sync_tool_that_never_returns() {
    for tool in ["stuck", "spin"] {
        let env = env(tool);
        let out = common::run_bounded(env.agent("run", &["--tool-timeout", "0.5", "go"]), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("timed out after"),
            "{}",
            text(&out.stdout)
        );
        // chat: the turn, then the end of its input.
        let mut chat = env.agent("chat", &["--tool-timeout", "0.5"]);
        chat.stdin(Stdio::piped());
        let mut child = chat
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = wait_bounded(child);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

fn wait_bounded(child: std::process::Child) -> std::process::Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: a signal to our own child by its id.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("plughost did not exit within {LIMIT:?}");
        }
    }
}

#[test]
fn mcp_exits_when_stdin_closes_with_a_call_still_stuck() {
    let env = env("stuck");
    let mut child = env
        .cmd(&["mcp", "--tool-timeout", "0.5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stuck","arguments":{}}}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut lines = BufReader::new(stdout).lines();
    let answered = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains(r#""id":1"#))
        .expect("the stuck call is answered");
    assert!(answered.contains("timed out after"), "{answered}");
    drop(stdin);
    let out = wait_bounded(child);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn hook_timeout_bounds_sync_hooks_of_every_event() {
    for event in [
        "pre_llm_call",
        "post_llm_call",
        "pre_tool_call",
        "on_session_end",
    ] {
        let env = env("echo");
        let mut cmd = env.agent("run", &["--hook-timeout", "0.5", "go"]);
        cmd.env("HANG_EVENT", event);
        let out = common::run_bounded(cmd, LIMIT);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{event}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "hook {event} callback spin of plugin 'hanging' failed"
            )),
            "{event}: {stderr}"
        );
    }
}

#[test]
fn a_register_that_never_returns_is_abandoned_at_the_load_deadline() {
    let env = env("echo");
    let config = serde_json::json!({"plugins": {"enabled": ["hanging", "fine"], "load_timeout_seconds": 0.5}});
    std::fs::write(env.home.path().join("config.json"), config.to_string()).unwrap();
    let mut cmd = env.cmd(&["plugins", "list", "--json"]);
    cmd.env("HANG_REGISTER", "1");
    let out = common::run_bounded(cmd, LIMIT);
    let stdout = text(&out.stdout);
    let list: serde_json::Value = serde_json::from_str(&stdout).expect(&stdout);
    let of = |key: &str| {
        list.as_array()
            .or_else(|| list["plugins"].as_array())
            .unwrap()
            .iter()
            .find(|p| p["key"] == key)
            .cloned()
            .unwrap()
    };
    assert_eq!(of("fine")["status"], "loaded", "{stdout}");
    let hanging = of("hanging");
    assert_eq!(hanging["status"], "failed", "{hanging}");
    assert!(
        hanging.to_string().contains("did not return within 0.5 s"),
        "{hanging}"
    );
}

#[test]
fn a_fifo_named_config_json_is_refused_not_waited_on() {
    let env = env("echo");
    let config = env.home.path().join("config.json");
    std::fs::remove_file(&config).unwrap();
    let c = std::ffi::CString::new(config.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = common::run_bounded(env.cmd(&["plugins", "list"]), LIMIT);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a FIFO, not a regular file"), "{stderr}");
}

#[test]
fn serve_exits_within_its_grace_on_sigterm_with_a_sync_tool_stuck() {
    let env = env("stuck");
    let script = env.script();
    let mut child = env
        .cmd(&[
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--script",
            &script,
            "--shutdown-grace",
            "0.5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve ended early"
        );
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let addr = url.trim_start_matches("http://").to_string();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"go"}]}"#;
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The tool is running once the turn's tool call shows in the log.
    std::thread::sleep(Duration::from_millis(800));
    // SAFETY: a signal to our own child by its id.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    });
    let out = wait_bounded(child);
    assert_eq!(out.status.code(), Some(0));
}
