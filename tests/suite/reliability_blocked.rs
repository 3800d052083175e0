//! Issue 27 items 2 and 5, the in-process cases the watchdog alone could
//! not bound: a sync hook blocked in C (`time.sleep(1000)`, a blocking
//! socket read) is abandoned at `--hook-timeout` (the turn ends, the
//! process exits); a plugin that forks without exec leaves no copy of
//! plughost's descriptors in its child. Each case runs the real binary
//! with the plugin in-process (`--isolate none`), under a wall-clock bound.
use crate::common;

use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

/// `BLOCK_EVENT` names the hook that blocks in C; `BLOCK_HOW` how.
const BLOCKING: &str = r#"
import os, socket, time
def register(ctx):
    ctx.register_tool("echo", {"type": "object"}, lambda: "echoed")
    how = os.environ.get("BLOCK_HOW", "sleep")
    def block(*a, **k):
        if how == "read":
            a, b = socket.socketpair()
            block.keep = (a, b)
            a.recv(1)  # nobody ever writes
        else:
            time.sleep(1000)
    ctx.register_hook(os.environ["BLOCK_EVENT"], block)
"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn blocking_env() -> (tempfile::TempDir, tempfile::TempDir) {
    let home = common::home_with(&["blocking"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "blocking",
        "name: blocking\n",
        &[("__init__.py", BLOCKING)],
    );
    std::fs::write(
        home.path().join("script.yaml"),
        "turns:\n  - tool_calls:\n      - name: echo\n        args: {}\n  - say: \"Done: {tool_results}\"\n",
    )
    .unwrap();
    (home, common::no_bundled())
}

fn run_turn(
    home: &std::path::Path,
    bundled: &std::path::Path,
    event: &str,
    how: &str,
) -> std::process::Output {
    let script = home.join("script.yaml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(home)
        .args([
            "--isolate",
            "none",
            "run",
            "--model",
            "scripted",
            "--script",
        ])
        .arg(&script)
        .args(["--hook-timeout", "0.5", "go"])
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env("BLOCK_EVENT", event)
        .env("BLOCK_HOW", how)
        .env_remove("PLUGHOST_LOG");
    common::run_bounded(cmd, LIMIT)
}

#[test]
fn a_sync_hook_blocked_in_c_is_abandoned_at_the_hook_timeout() {
    let (home, bundled) = blocking_env();
    for (event, how) in [
        ("pre_tool_call", "sleep"),
        ("pre_tool_call", "read"),
        ("post_llm_call", "sleep"),
        ("on_session_end", "read"),
    ] {
        let out = run_turn(home.path(), bundled.path(), event, how);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{event}/{how}: {stderr}");
        assert!(
            stderr.contains(&format!("hook {event} callback"))
                && stderr.contains("took longer than its 0.5 s budget"),
            "{event}/{how}: {stderr}"
        );
        // The loop went on: the tool ran and the turn answered.
        assert!(stdout.contains("Done: echoed"), "{event}/{how}: {stdout}");
    }
}

const NOOP_HOOKS: &str = r#"
def register(ctx):
    ctx.register_tool("noop", {"type": "object"}, lambda: "ok")
    ctx.register_hook("pre_tool_call", lambda c: None)
    ctx.register_hook("post_tool_call", lambda c: None)
    ctx.register_hook("transform_tool_result", lambda c: None)
"#;

/// Per tool call with three no-op sync hooks, `limit` as the hook timeout.
fn per_call(limit: Option<Duration>) -> Duration {
    let home = common::home_with(&["noop"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "noop",
        "name: noop\n",
        &[("__init__.py", NOOP_HOOKS)],
    );
    let bundled = common::no_bundled();
    let mut builder = plughost::Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .isolate(plughost::plugins::config::Isolation::None);
    if let Some(limit) = limit {
        builder = builder.hook_timeout(limit);
    }
    let host = builder.build().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    let n = 2000u32;
    rt.block_on(async {
        for _ in 0..200 {
            assert_eq!(
                host.call_tool("noop", serde_json::json!({}), "").await.text,
                "ok"
            );
        }
        let started = std::time::Instant::now();
        for _ in 0..n {
            host.call_tool("noop", serde_json::json!({}), "").await;
        }
        started.elapsed() / n
    })
}

/// What the hand-off costs a tool call with three sync hooks (printed;
/// `-- --nocapture`), and that hooks under a limit still answer.
#[test]
fn hooks_under_a_limit_cost_one_hand_off_each() {
    let inline = per_call(None);
    let bounded = per_call(Some(Duration::from_secs(30)));
    println!(
        "tool call with 3 no-op sync hooks: {inline:?} unbounded, {bounded:?} under --hook-timeout"
    );
}

/// A tool that forks without exec; the child sleeps on, holding whatever
/// it inherited. Answers the child's pid, so the test can end it.
const FORKER: &str = r#"
import os, time
def fork():
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    return "child %d" % pid
def register(ctx):
    ctx.register_tool("fork", {"type": "object"}, fork)
"#;

#[test]
fn a_forked_child_of_a_plugin_does_not_keep_the_mcp_stream_open() {
    use std::io::{BufRead, BufReader, Write};
    let home = common::home_with(&["forker"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "forker",
        "name: forker\n",
        &[("__init__.py", FORKER)],
    );
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args(["--isolate", "none", "mcp"])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fork","arguments":{}}}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut forked = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("child ") {
                let digits: String = line[at + 6..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                forked = digits.parse::<i32>().ok();
                let _ = tx.send(Some(forked));
            }
        }
        // End of the stream: plughost and every holder of it are gone.
        let _ = tx.send(None);
        forked
    });
    let forked = rx
        .recv_timeout(LIMIT)
        .expect("the call is answered")
        .expect("a pid");
    drop(stdin);
    let eof = rx.recv_timeout(Duration::from_secs(10));
    let status = child.wait().unwrap();
    if let Some(pid) = forked {
        // SAFETY: a signal to the plugin's child, by the pid it reported.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(status.success(), "{status:?}");
    assert!(
        matches!(eof, Ok(None)),
        "the MCP client saw no end of stream while the plugin's forked child lived"
    );
}
