//! Reliability suite for the built-in `exec` tool (issue 9): endless output
//! stays within the cap while it streams, and the command's process group
//! dies with the call — on timeout, when the call's future is dropped, and
//! when a chat turn is cancelled (what Ctrl-C does). Each case runs under a
//! wall-clock bound, so a hang fails the test instead of CI.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::tools::{builtin_tools, ToolLimits, Workspace};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::core::hooks::ToolCallContext;
use plughost::core::registry::ToolReturn;
use plughost::{Host, Tool};
use serde_json::{json, Value};

const CAP: usize = 16 * 1024;

struct Fixture {
    _dir: tempfile::TempDir,
    ws: Workspace,
    tools: Vec<Tool>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        let tools = builtin_tools(&ws, &ToolLimits::default());
        Fixture {
            _dir: dir,
            ws,
            tools,
        }
    }

    fn root(&self) -> &Path {
        self.ws.root()
    }

    /// The call's future (not yet polled), or its immediate refusal.
    fn exec(
        &self,
        args: Value,
    ) -> Result<plughost::core::hooks::BoxFuture<Result<String, plughost::PluginError>>, String>
    {
        let tool = self.tools.iter().find(|t| t.spec.name == "exec").unwrap();
        let mut ctx = ToolCallContext {
            tool_name: "exec".into(),
            params: args.as_object().unwrap().clone(),
            ..Default::default()
        };
        match tool.handler.call(&mut ctx) {
            ToolReturn::Pending(call) => Ok(call),
            ToolReturn::Ready(result) => Err(result.unwrap_or_else(|e| e.message)),
        }
    }

    async fn run(&self, args: Value) -> String {
        let call = self.exec(args).expect("exec runs the command");
        bounded(20, call).await.expect("exec answers")
    }
}

/// `fut`, failing the test if it takes longer than `secs`.
async fn bounded<T>(secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("the case hung for more than {secs} s"))
}

/// Gone, or a zombie nobody has reaped yet (it runs no more either way).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

async fn assert_dies(pid: u32, what: &str) {
    // Generous: a wait for the kill to land, not a speed check.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !is_dead(pid) {
        assert!(
            Instant::now() < deadline,
            "{what} (pid {pid}) still runs 30 s after the call ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pid a command wrote to `file`, once it is there.
async fn pid_in(file: PathBuf) -> u32 {
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A shell, and a grandchild that keeps the pipes open: both pids written
/// to files so the test can watch them.
const SLEEPER: &str = "echo $$ > shell.pid; sleep 30 & echo $! > child.pid; wait";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_output_stays_within_the_cap_and_the_command_ends() {
    let f = Fixture::new();
    let before = peak_rss_kib();
    let started = Instant::now();
    let text = f
        .run(json!({"command": "echo $$ > yes.pid; exec yes", "timeout": 2}))
        .await;
    let grown_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 128,
        "peak memory grew by {grown_mib} MiB while `yes` ran: output was buffered"
    );
    let note = "[timed out after 2 s; the command was killed]";
    assert!(text.ends_with(note), "{}", &text[text.len() - 100..]);
    assert!(text.starts_with("y\ny\ny\n"), "{}", &text[..20]);
    assert!(
        text.len() <= CAP + 100,
        "{} bytes returned for a cap of {CAP}",
        text.len()
    );
    let cut: u64 = text
        .split("[… ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the cut is counted");
    assert!(cut > 1_000_000, "only {cut} bytes counted as cut");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_dies(pid_in(f.root().join("yes.pid")).await, "yes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_output_keeps_its_head_and_tail_and_counts_the_rest() {
    let f = Fixture::new();
    let text = f
        .run(json!({"command": "head -c 100000 /dev/zero | tr '\\0' a; printf END >&2"}))
        .await;
    let expected = format!(
        "{}\n[… {} bytes of output cut …]\n{}END",
        "a".repeat(CAP / 2),
        100_003 - CAP,
        "a".repeat(CAP / 2 - 3)
    );
    assert_eq!(text, expected);

    // Short output whole, stdout before stderr, the exit code after.
    let text = f
        .run(json!({"command": "echo out; echo err >&2; exit 3"}))
        .await;
    assert_eq!(text, "out\nerr\n\n[exit code: 3]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_whole_process_group() {
    let f = Fixture::new();
    let text = f.run(json!({"command": SLEEPER, "timeout": 0.5})).await;
    assert_eq!(text, "[timed out after 0.5 s; the command was killed]");
    assert_dies(pid_in(f.root().join("shell.pid")).await, "the shell").await;
    assert_dies(pid_in(f.root().join("child.pid")).await, "its child").await;
}

/// The call's future dropped (what a dispatch timeout or a cancelled turn
/// does): the command's children die with it, not only the shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_call_kills_the_commands_children() {
    let f = Fixture::new();
    let call = f.exec(json!({"command": SLEEPER})).unwrap();
    let child = f.root().join("child.pid");
    let pid = bounded(10, async {
        tokio::select! {
            _ = call => panic!("the command finished instead of sleeping"),
            pid = pid_in(child.clone()) => pid,
        }
    })
    .await;
    // `call` was dropped when the select ended.
    assert_dies(pid, "the background child").await;
    assert_dies(pid_in(f.root().join("shell.pid")).await, "the shell").await;
}

/// `plughost chat`'s Ctrl-C: the turn is cancelled while `exec` runs.
#[test]
fn a_cancelled_turn_kills_the_commands_children() {
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&home.path().join("workspace")).unwrap();
    let mut builder = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path());
    for tool in builtin_tools(&ws, &ToolLimits::default()) {
        builder = builder.tool(tool);
    }
    let host = Arc::new(builder.build().unwrap());
    let script = format!(
        "turns:\n  - tool_calls:\n      - name: exec\n        args: {{command: {}}}\n  - say: done\n",
        serde_json::to_string(SLEEPER).unwrap()
    );
    let provider = Arc::new(Scripted::new(Script::parse(&script, "test.yaml").unwrap()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let agent = {
        let _g = rt.enter();
        Agent::new(host, provider, AgentConfig::default(), None)
    };
    let child = ws.root().join("child.pid");
    rt.block_on(bounded(20, async {
        let cancel = async {
            pid_in(child.clone()).await;
        };
        let report = agent
            .send_cancellable(Inbound::new("s", "go"), None, cancel)
            .await;
        assert!(report.interrupted, "{report:?}");
        assert_dies(pid_in(child.clone()).await, "the background child").await;
        assert_dies(pid_in(ws.root().join("shell.pid")).await, "the shell").await;
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_working_directory_is_confined_to_the_workspace() {
    let f = Fixture::new();
    let outside = f.root().parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, f.root().join("linkdir")).unwrap();
    std::fs::write(f.root().join("file.txt"), "x").unwrap();
    std::fs::create_dir(f.root().join("sub")).unwrap();
    let root = f.root().display().to_string();
    let refused = |cwd: &str| {
        f.exec(json!({"command": "pwd", "cwd": cwd}))
            .err()
            .unwrap_or_else(|| panic!("cwd {cwd} was accepted"))
    };
    for cwd in ["..", "linkdir", "sub/../..", outside.to_str().unwrap()] {
        assert_eq!(
            refused(cwd),
            format!("{cwd} is outside the workspace ({root})")
        );
    }
    assert_eq!(
        refused("file.txt"),
        "cannot run a command in file.txt: Not a directory (os error 20)"
    );
    assert_eq!(
        refused("missing"),
        "cannot run a command in missing: No such file or directory (os error 2)"
    );
    let text = f.run(json!({"command": "pwd", "cwd": "sub"})).await;
    assert_eq!(text, format!("{root}/sub\n"));
}

/// A timeout no `Duration` can hold is the maximum, not a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_timeout_is_clamped() {
    let f = Fixture::new();
    for timeout in [json!(1e20), json!(-1), json!(0)] {
        let text = f
            .run(json!({"command": "echo hi", "timeout": timeout}))
            .await;
        assert_eq!(text, "hi\n");
    }
}
