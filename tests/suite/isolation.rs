//! Crash isolation (issue 10): throwaway plugins that segfault, exit,
//! abort, spin, or crash in `register()` or a hook, each run isolated
//! through the Rust API and through `tools call`, every case under a
//! wall-clock bound so a hang fails the test instead of hanging CI.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::core::outcome::{PluginFault, ResourceLimit, ToolOutcome};
use plughost::isolation::{WorkerCommand, WorkerState};
use plughost::plugins::config::Isolation;
use plughost::Host;
use serde_json::json;

/// Bound for one hostile case (starting workers and Python included).
const BOUND: Duration = Duration::from_secs(60);

/// Run `f` on its own thread and fail if it does not finish within `limit`.
fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the case did not finish within {limit:?}: it hangs")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the case failed (see above)"),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const HOSTILE: &str = r#"
import ctypes, os, time
def spin():
    while True:
        pass
def first_only(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    return "second time lucky"
def register(ctx):
    print("print() from register goes to stderr, not the protocol")
    ctx.register_tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}},
                      lambda text="": print("noise on stdout") or ("echo:" + text))
    ctx.register_tool("segv", {}, lambda: ctypes.string_at(0))
    ctx.register_tool("exit3", {}, lambda: os._exit(3))
    ctx.register_tool("abort", {}, lambda: os.abort())
    ctx.register_tool("spin", {}, spin)
    ctx.register_tool("first_only", {"type": "object", "properties": {"marker": {"type": "string"}}}, first_only)
    ctx.register_tool("pid", {}, lambda: str(os.getpid()))
"#;

fn setup(plugins: &[(&str, &str)]) -> (tempfile::TempDir, tempfile::TempDir) {
    let keys: Vec<&str> = plugins.iter().map(|(k, _)| *k).collect();
    let home = home_with(&keys);
    for (key, source) in plugins {
        write_plugin(
            &home.path().join("plugins"),
            key,
            &format!("name: {key}\nversion: 1.0\n"),
            &[("__init__.py", source)],
        );
    }
    (home, no_bundled())
}

fn builder(home: &Path, bundled: &Path) -> plughost::HostBuilder {
    Host::builder()
        .home(home)
        .bundled_dir(bundled)
        .worker_command(WorkerCommand::binary(env!("CARGO_BIN_EXE_plughost")))
}

fn isolated_host(plugins: &[(&str, &str)]) -> (tempfile::TempDir, tempfile::TempDir, Host) {
    let (home, bundled) = setup(plugins);
    let host = builder(home.path(), bundled.path())
        .isolate(Isolation::All)
        .build()
        .unwrap();
    (home, bundled, host)
}

#[test]
fn a_worker_that_dies_fails_only_its_call_names_the_cause_and_restarts() {
    bounded(BOUND, || {
        let (home, bundled) = setup(&[("crashy", HOSTILE)]);
        // Three crashes in a row here: keep the breaker out of the way.
        let host = builder(home.path(), bundled.path())
            .isolate(Isolation::All)
            .isolation_breaker(10, Duration::from_secs(60))
            .build()
            .unwrap();
        assert!(host.plugins()[0].isolated && host.plugins()[0].loaded);
        let rt = rt();
        let call = |name: &str| rt.block_on(host.call_tool(name, json!({}), "s"));
        for (tool, cause) in [
            ("segv", "SIGSEGV"),
            ("exit3", "exit code 3"),
            ("abort", "SIGABRT"),
        ] {
            let r = call(tool);
            assert_eq!(
                r.text,
                format!("Error executing {tool}: plugin 'crashy' crashed ({cause})")
            );
            let fault = r.outcome.error().and_then(|e| e.fault.as_deref().cloned());
            assert!(
                matches!(fault, Some(PluginFault::Crashed { ref plugin, .. }) if plugin == "crashy"),
                "{fault:?}"
            );
            // The next call gets a fresh worker.
            assert_eq!(call("echo").text, "echo:");
        }
    });
}

#[test]
fn print_in_a_plugin_never_corrupts_the_protocol() {
    bounded(BOUND, || {
        let (_h, _b, host) = isolated_host(&[("crashy", HOSTILE)]);
        let rt = rt();
        for i in 0..20 {
            let r = rt.block_on(host.call_tool("echo", json!({"text": i.to_string()}), ""));
            assert_eq!(r.text, format!("echo:{i}"));
        }
    });
}

#[test]
fn a_spinning_call_past_its_limit_is_cancelled_alone_and_the_worker_serves_on() {
    bounded(BOUND, || {
        let (_h, _b, host) = isolated_host(&[("crashy", HOSTILE)]);
        let rt = rt();
        let pid_before = rt.block_on(host.call_tool("pid", json!({}), "")).text;
        let spun = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_millis(300),
                host.call_tool("spin", json!({}), ""),
            )
            .await
        });
        // The spin never ends: the timeout firing at all shows the call did
        // not block this thread (else `bounded` reports a hang).
        assert!(spun.is_err(), "the spin cannot finish");
        let pid_after = rt.block_on(host.call_tool("pid", json!({}), "")).text;
        // Issue 47: only that call is given up on (its thread is left to
        // spin); the worker, still responsive, serves the next call.
        assert_eq!(
            pid_before, pid_after,
            "the same worker serves the next call"
        );
        for _ in 0..4 {
            let _ = rt.block_on(async {
                tokio::time::timeout(
                    Duration::from_millis(100),
                    host.call_tool("spin", json!({}), ""),
                )
                .await
            });
        }
        assert_eq!(
            rt.block_on(host.call_tool("echo", json!({}), "")).text,
            "echo:"
        );
    });
}

#[test]
fn a_plugin_crashing_on_its_first_call_only_recovers() {
    bounded(BOUND, || {
        let (home, _b, host) = isolated_host(&[("crashy", HOSTILE)]);
        let marker = home.path().join("crashed-once");
        let args = json!({"marker": marker.to_string_lossy()});
        let rt = rt();
        let first = rt.block_on(host.call_tool("first_only", args.clone(), ""));
        assert_eq!(
            first.text,
            "Error executing first_only: plugin 'crashy' crashed (exit code 9)"
        );
        // The next call gets a fresh worker (how fast is measured, not
        // asserted, in measure_isolation_costs; `bounded` catches a hang).
        let second = rt.block_on(host.call_tool("first_only", args, ""));
        assert_eq!(second.text, "second time lucky");
    });
}

#[test]
fn a_plugin_crashing_on_every_call_trips_the_breaker_and_then_fails_fast() {
    bounded(BOUND, || {
        // Every worker that loads the plugin logs its pid: "fails fast" means
        // the open breaker answers without starting (and waiting for) one.
        let logged = format!(
            "{HOSTILE}\n_register = register\ndef register(ctx):\n    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'workers.log'), 'a') as f:\n        f.write(str(os.getpid()) + '\\n')\n    _register(ctx)\n"
        );
        let (home, bundled) = setup(&[("crashy", logged.as_str())]);
        let workers = {
            let log = home.path().join("plugins/crashy/workers.log");
            move || {
                std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .lines()
                    .count()
            }
        };
        let host = builder(home.path(), bundled.path())
            .isolate(Isolation::Only(vec!["crashy".into()]))
            .isolation_breaker(2, Duration::from_secs(60))
            .build()
            .unwrap();
        let rt = rt();
        let call = |name: &str| rt.block_on(host.call_tool(name, json!({}), ""));
        assert!(call("segv").text.ends_with("crashed (SIGSEGV)"));
        assert!(call("segv").text.ends_with("crashed (SIGSEGV)"));
        let started_before = workers();
        assert!(
            started_before >= 2,
            "each crashed call had a worker: {started_before}"
        );
        let off = call("echo");
        let _ = call("echo");
        assert_eq!(workers(), started_before, "fails fast: no worker started");
        assert_eq!(
            off.text,
            "Error executing echo: plugin 'crashy' is disabled: it crashed 2 times within 60 s (restart plughost to try it again)"
        );
        assert!(matches!(
            off.outcome
                .error()
                .and_then(|e| e.fault.as_deref().cloned()),
            Some(PluginFault::Disabled { crashes: 2, .. })
        ));
    });
}

const CRASH_IN_REGISTER: &str = r#"
import ctypes
def register(ctx):
    ctx.register_tool("never", {}, lambda: "never")
    ctypes.string_at(0)
"#;

const SPIN_IN_REGISTER: &str = r#"
def register(ctx):
    while True:
        pass
"#;

const FINE: &str = r#"
def register(ctx):
    ctx.register_tool("fine", {}, lambda: "fine")
"#;

#[test]
fn a_register_that_crashes_or_spins_marks_only_that_plugin_failed() {
    bounded(BOUND, || {
        let (home, bundled) = setup(&[
            ("crash-reg", CRASH_IN_REGISTER),
            ("spin-reg", SPIN_IN_REGISTER),
            ("fine", FINE),
        ]);
        let started = Instant::now();
        // Long enough for a worker to start on a loaded machine.
        let host = builder(home.path(), bundled.path())
            .isolate(Isolation::All)
            .isolation_load_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(30));
        let record = |k: &str| host.plugins().iter().find(|p| p.key == k).unwrap().clone();
        let crashed = record("crash-reg");
        assert!(!crashed.loaded);
        assert_eq!(
            crashed.error.as_deref(),
            Some("plugin 'crash-reg' crashed (SIGSEGV)")
        );
        let spun = record("spin-reg");
        assert!(!spun.loaded);
        assert_eq!(
            spun.error.as_deref(),
            Some(
                "register() did not return within 5 s (plugins.load_timeout_seconds); the plugin is abandoned"
            )
        );
        assert!(host.registry().tool("never").is_none());
        assert!(record("fine").loaded);
        let r = rt().block_on(host.call_tool("fine", json!({}), ""));
        assert_eq!(r.text, "fine");
    });
}

const CRASHING_HOOK: &str = r#"
import ctypes
def register(ctx):
    ctx.register_tool("after", {}, lambda: "ran anyway")
    ctx.register_hook("pre_tool_call", lambda c: ctypes.string_at(0))
"#;

#[test]
fn a_crashing_hook_is_a_hook_failure_and_the_call_goes_on() {
    bounded(BOUND, || {
        let (_h, _b, host) = isolated_host(&[("hooky", CRASHING_HOOK)]);
        let rt = rt();
        let r = rt.block_on(host.call_tool("after", json!({}), ""));
        assert_eq!(r.text, "ran anyway");
        let pinned_registry = host.registry();
        let entry = &pinned_registry
            .hooks()
            .entries(plughost::HookEvent::ToolGuard)[0];
        assert_eq!(entry.stats.errors(), 1);
        // And again, with a fresh worker.
        let r = rt.block_on(host.call_tool("after", json!({}), ""));
        assert_eq!(r.text, "ran anyway");
        assert_eq!(entry.stats.errors(), 2);
    });
}

const GUARDED: &str = r#"
from flowly.agent.hooks import BlockAction
def pre(ctx):
    if ctx.tool_name == "danger":
        return BlockAction(message="not here")
    if ctx.tool_name == "echo":
        ctx.params["text"] = ctx.params.get("text", "") + " (edited)"
def post(ctx):
    pass
def transform(ctx):
    if ctx.tool_name == "shout":
        return ctx.result.upper()
def boom():
    raise ValueError("bad input")
def register(ctx):
    ctx.register_tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}}, lambda text="": text)
    ctx.register_tool("shout", {}, lambda: "quiet")
    ctx.register_tool("danger", {}, lambda: "ran")
    ctx.register_tool("boom", {}, boom)
    ctx.register_tool("closed", {}, lambda: "x", check_fn=lambda: False)
    ctx.register_tool("typed", {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}, lambda n: str(n))
    ctx.register_hook("pre_tool_call", pre)
    ctx.register_hook("post_tool_call", post)
    ctx.register_hook("transform_tool_result", transform)
    ctx.register_command("hello", lambda raw: "hello " + raw)
"#;

#[test]
fn the_pipeline_gives_the_same_results_isolated_and_in_process() {
    bounded(BOUND, || {
        let calls = [
            ("echo", json!({"text": "hi"})),
            ("danger", json!({})),
            ("shout", json!({})),
            ("boom", json!({})),
            ("closed", json!({})),
            ("typed", json!({"n": "x"})),
            ("typed", json!({"n": 4})),
            ("missing", json!({})),
        ];
        let run = |isolation: Isolation| {
            let (home, bundled) = setup(&[("guarded", GUARDED)]);
            let host = builder(home.path(), bundled.path())
                .isolate(isolation)
                .build()
                .unwrap();
            let rt = rt();
            let results: Vec<(String, String)> = calls
                .iter()
                .map(|(name, args)| {
                    let r = rt.block_on(host.call_tool(name, args.clone(), "s"));
                    (r.text, r.outcome.kind().to_string())
                })
                .collect();
            let command = rt.block_on(host.run_command("/hello world")).unwrap();
            (results, command, host.plugins()[0].isolated)
        };
        let (inproc, cmd_in, iso_in) = run(Isolation::None);
        let (isolated, cmd_iso, iso_iso) = run(Isolation::All);
        assert!(!iso_in && iso_iso);
        assert_eq!(inproc, isolated);
        assert_eq!(cmd_in, cmd_iso);
        assert_eq!(inproc[0].0, "hi (edited)");
        assert_eq!(inproc[1].0, "[blocked: not here]");
        assert_eq!(inproc[2].0, "QUIET");
        assert_eq!(inproc[3].0, "Error executing boom: bad input");
        assert_eq!(cmd_iso.as_deref(), Some("hello world"));
    });
}

#[test]
fn isolated_and_in_process_plugins_work_together() {
    bounded(BOUND, || {
        let (home, bundled) = setup(&[("crashy", HOSTILE), ("fine", FINE)]);
        let host = builder(home.path(), bundled.path())
            .isolate(Isolation::Only(vec!["crashy".into()]))
            .build()
            .unwrap();
        let rec = |k: &str| host.plugins().iter().find(|p| p.key == k).unwrap().isolated;
        assert!(rec("crashy") && !rec("fine"));
        let rt = rt();
        let my_pid = std::process::id().to_string();
        assert_ne!(
            rt.block_on(host.call_tool("pid", json!({}), "")).text,
            my_pid
        );
        let segv = rt.block_on(host.call_tool("segv", json!({}), ""));
        assert!(matches!(segv.outcome, ToolOutcome::Raised { .. }));
        assert_eq!(
            rt.block_on(host.call_tool("fine", json!({}), "")).text,
            "fine"
        );
        assert_eq!(
            rt.block_on(host.call_tool("echo", json!({}), "")).text,
            "echo:"
        );
    });
}

/// Run the binary with a bound; (exit code, stdout, stderr).
fn cli(home: &Path, bundled: &Path, args: &[&str], limit: Duration) -> (i32, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("plughost {args:?} did not finish within {limit:?}");
        }
    }
}

#[test]
fn tools_call_survives_each_crash_and_times_out_a_spin() {
    let (home, bundled) = setup(&[("crashy", HOSTILE)]);
    let (h, b) = (home.path(), bundled.path());
    for (tool, cause) in [
        ("segv", "SIGSEGV"),
        ("exit3", "exit code 3"),
        ("abort", "SIGABRT"),
    ] {
        let (code, out, _) = cli(h, b, &["--isolate", "crashy", "tools", "call", tool], BOUND);
        assert_eq!(code, 1);
        assert_eq!(
            out.trim(),
            format!("Error executing {tool}: plugin 'crashy' crashed ({cause})")
        );
    }
    let started = Instant::now();
    let (code, out, _) = cli(
        h,
        b,
        &[
            "--isolate",
            "all",
            "tools",
            "call",
            "spin",
            "--timeout",
            "1",
        ],
        BOUND,
    );
    assert_eq!(
        (code, out.trim()),
        (1, "Error executing spin: timed out after 1 s")
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let (code, out, err) = cli(
        h,
        b,
        &[
            "--isolate",
            "all",
            "tools",
            "call",
            "echo",
            "--args",
            r#"{"text": "x"}"#,
        ],
        BOUND,
    );
    assert_eq!((code, out.trim()), (0, "echo:x"), "{err}");
    assert!(
        err.contains("noise on stdout"),
        "a plugin's print goes to stderr: {err}"
    );
}

#[test]
fn tools_call_timeout_also_ends_a_spinning_in_process_call() {
    let (home, bundled) = setup(&[("crashy", HOSTILE)]);
    let started = Instant::now();
    let (code, out, _) = cli(
        home.path(),
        bundled.path(),
        &["tools", "call", "spin", "--timeout", "1"],
        BOUND,
    );
    // In-process, register()'s print() lands on stdout first.
    let last = out.trim().lines().last().unwrap_or_default();
    assert_eq!(
        (code, last),
        (1, "Error executing spin: timed out after 1 s")
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn isolation_is_chosen_by_flag_or_config_and_bad_values_are_refused() {
    let (home, bundled) = setup(&[("crashy", CRASHING_HOOK), ("fine", FINE)]);
    let (h, b) = (home.path(), bundled.path());
    let listed = |args: &[&str]| {
        let (code, out, err) = cli(h, b, args, BOUND);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["key"].as_str().unwrap().to_string(),
                    p["isolated"].as_bool().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert!(listed(&["plugins", "list", "--json"])
        .iter()
        .all(|(_, i)| !i));
    let only = listed(&["--isolate", "fine", "plugins", "list", "--json"]);
    assert!(only.contains(&("fine".into(), true)) && only.contains(&("crashy".into(), false)));
    let config = json!({"plugins": {"enabled": ["crashy", "fine"], "isolate": "all"}});
    std::fs::write(h.join("config.json"), config.to_string()).unwrap();
    assert!(listed(&["plugins", "list", "--json"])
        .iter()
        .all(|(_, i)| *i));
    assert!(listed(&["--isolate", "none", "plugins", "list", "--json"])
        .iter()
        .all(|(_, i)| !i));

    let (code, _, err) = cli(h, b, &["--isolate", "a,,b", "plugins", "list"], BOUND);
    assert_eq!(code, 2);
    assert!(
        err.contains("--isolate") && err.contains("empty plugin key"),
        "{err}"
    );
    let config = json!({"plugins": {"enabled": ["crashy"], "isolate": 3}});
    std::fs::write(h.join("config.json"), config.to_string()).unwrap();
    let (code, _, err) = cli(h, b, &["plugins", "list"], BOUND);
    assert_eq!(code, 1);
    assert!(
        err.contains("plugins.isolate") && err.contains("\"all\""),
        "{err}"
    );
}

/// Numbers for the README (run with `--nocapture`): the added latency of
/// an isolated call, the worker's start-up, and crash → next success.
#[test]
fn measure_isolation_costs() {
    bounded(Duration::from_secs(120), || {
        let plugin = r#"
import ctypes
def register(ctx):
    ctx.register_tool("noop", {}, lambda: "ok")
    ctx.register_tool("segv", {}, lambda: ctypes.string_at(0))
"#;
        let rt = rt();
        let per_call = |host: &Host| {
            for _ in 0..50 {
                rt.block_on(host.call_tool("noop", json!({}), ""));
            }
            let n = 1000;
            let started = Instant::now();
            for _ in 0..n {
                rt.block_on(host.call_tool("noop", json!({}), ""));
            }
            started.elapsed() / n
        };
        let (home, bundled) = setup(&[("bench", plugin)]);
        let inproc = builder(home.path(), bundled.path())
            .isolate(Isolation::None)
            .build()
            .unwrap();
        let in_process = per_call(&inproc);
        let started = Instant::now();
        let iso = builder(home.path(), bundled.path())
            .isolate(Isolation::All)
            .build()
            .unwrap();
        let startup = started.elapsed();
        let isolated = per_call(&iso);
        let mut recoveries = Vec::new();
        for _ in 0..2 {
            rt.block_on(iso.call_tool("segv", json!({}), ""));
            let crashed = Instant::now();
            let r = rt.block_on(iso.call_tool("noop", json!({}), ""));
            assert_eq!(r.text, "ok");
            recoveries.push(crashed.elapsed());
        }
        println!(
            "isolation: in-process call {in_process:?}, isolated call {isolated:?} (+{:?}), worker start-up (build) {startup:?}, crash -> next success {recoveries:?}",
            isolated.saturating_sub(in_process)
        );
    });
}

/// Write `config.json` (keeps the test's plugins enabled).
fn write_config(home: &Path, config: serde_json::Value) {
    std::fs::write(home.join("config.json"), config.to_string()).unwrap();
}

const GREEDY: &str = r#"
def hog(mib):
    data = bytearray(mib * 1024 * 1024)
    return str(len(data))
def spin():
    while True:
        pass
def register(ctx):
    ctx.register_tool("hog", {"type": "object", "properties": {"mib": {"type": "integer"}}}, hog)
    ctx.register_tool("spin", {}, spin)
    ctx.register_tool("ok", {}, lambda: "ok")
"#;

#[test]
fn a_plugin_past_its_memory_or_cpu_limit_fails_only_that_call_naming_the_limit() {
    bounded(BOUND, || {
        let (home, bundled) = setup(&[("greedy", GREEDY)]);
        write_config(
            home.path(),
            json!({"plugins": {"enabled": ["greedy"], "isolate": ["greedy"],
                   "limits": {"greedy": {"memory_mb": 256, "cpu_seconds": 1}}}}),
        );
        let host = builder(home.path(), bundled.path()).build().unwrap();
        let rt = rt();
        let call = |name: &str, args| rt.block_on(host.call_tool(name, args, ""));
        let fault =
            |r: &plughost::ToolResult| r.outcome.error().and_then(|e| e.fault.as_deref().cloned());

        assert_eq!(
            call("hog", json!({"mib": 16})).text,
            "16777216",
            "under the limit"
        );
        let hog = call("hog", json!({"mib": 1024}));
        assert_eq!(
            hog.text,
            "Error executing hog: plugin 'greedy' exceeded its memory limit (256 MiB)"
        );
        assert_eq!(
            fault(&hog),
            Some(PluginFault::LimitExceeded {
                plugin: "greedy".into(),
                limit: ResourceLimit::Memory { mib: 256 }
            })
        );
        assert_eq!(call("ok", json!({})).text, "ok", "a new worker serves");

        let spin = call("spin", json!({}));
        assert_eq!(
            spin.text,
            "Error executing spin: plugin 'greedy' exceeded its CPU time limit (1 s)"
        );
        assert_eq!(
            fault(&spin),
            Some(PluginFault::LimitExceeded {
                plugin: "greedy".into(),
                limit: ResourceLimit::CpuTime { seconds: 1 }
            })
        );
        assert_eq!(call("ok", json!({})).text, "ok");
        // The CPU limit is per call: calls after it are not charged for it.
        for _ in 0..3 {
            assert_eq!(call("ok", json!({})).text, "ok");
        }
        let status = host.worker_status("greedy").unwrap();
        assert_eq!((status.state, status.crashes), (WorkerState::Running, 2));
    });
}

#[test]
fn limits_reach_tools_call_and_bad_limits_are_refused_naming_the_key() {
    let (home, bundled) = setup(&[("greedy", GREEDY)]);
    let (h, b) = (home.path(), bundled.path());
    write_config(
        h,
        json!({"plugins": {"enabled": ["greedy"], "limits": {"*": {"memory_mb": 200}}}}),
    );
    let (code, out, err) = cli(
        h,
        b,
        &[
            "--isolate",
            "all",
            "tools",
            "call",
            "hog",
            "--args",
            r#"{"mib": 800}"#,
        ],
        BOUND,
    );
    assert_eq!(
        (code, out.trim()),
        (
            1,
            "Error executing hog: plugin 'greedy' exceeded its memory limit (200 MiB)"
        ),
        "{err}"
    );
    // In-process, the limit cannot be enforced: a warning says so.
    write_config(
        h,
        json!({"plugins": {"enabled": ["greedy"], "limits": {"greedy": {"memory_mb": 200}}}}),
    );
    let (code, out, err) = cli(h, b, &["tools", "call", "ok"], BOUND);
    assert_eq!((code, out.trim()), (0, "ok"));
    assert!(
        err.contains("plugins.limits.greedy is not enforced"),
        "{err}"
    );
    write_config(
        h,
        json!({"plugins": {"enabled": ["greedy"], "limits": {"greedy": {"memory": 200}}}}),
    );
    let (code, _, err) = cli(h, b, &["--isolate", "all", "tools", "call", "ok"], BOUND);
    assert_eq!(code, 1);
    assert!(
        err.contains("`plugins.limits.greedy.memory` is not a setting")
            && err.contains("memory_mb or cpu_seconds"),
        "{err}"
    );
}

#[test]
fn the_worker_state_is_known_through_the_host_and_plugins_doctor() {
    bounded(BOUND, || {
        let (home, bundled) = setup(&[("crashy", HOSTILE), ("fine", FINE)]);
        let host = builder(home.path(), bundled.path())
            .isolate(Isolation::Only(vec!["crashy".into()]))
            .isolation_breaker(2, Duration::from_secs(60))
            .build()
            .unwrap();
        assert!(
            host.worker_status("fine").is_none(),
            "in-process: no worker"
        );
        let running = host.worker_status("crashy").unwrap();
        assert_eq!(running.state, WorkerState::Running);
        let pid = rt().block_on(host.call_tool("pid", json!({}), "")).text;
        assert_eq!(running.pid.map(|p| p.to_string()), Some(pid));
        assert_eq!((running.crashes, running.recent_crashes), (0, 0));

        let rt = rt();
        rt.block_on(host.call_tool("segv", json!({}), ""));
        let restarting = host.worker_status("crashy").unwrap();
        assert_eq!(restarting.state, WorkerState::Restarting);
        assert_eq!((restarting.crashes, restarting.recent_crashes), (1, 1));
        assert!(restarting.pid.is_none() && restarting.next_start_in_ms.is_some());
        assert_eq!(
            rt.block_on(host.call_tool("echo", json!({}), "")).text,
            "echo:"
        );
        assert_eq!(
            host.worker_status("crashy").unwrap().state,
            WorkerState::Running
        );

        rt.block_on(host.call_tool("segv", json!({}), ""));
        let disabled = host.worker_status("crashy").unwrap();
        assert_eq!(disabled.state, WorkerState::Disabled);
        assert_eq!(
            (
                disabled.crashes,
                disabled.recent_crashes,
                disabled.breaker_crashes
            ),
            (2, 2, 2)
        );

        let report = plughost::host::doctor::Report::new(&host);
        let text = report.text();
        assert!(
            text.contains("    worker: disabled by its breaker after 2 crashes within 60 s"),
            "{text}"
        );
        assert!(
            text.contains("1 isolated plugin(s) disabled by their crash breaker: crashy"),
            "{text}"
        );
    });
    // Through the CLI: text and JSON.
    let (home, bundled) = setup(&[("crashy", HOSTILE), ("fine", FINE)]);
    let (h, b) = (home.path(), bundled.path());
    let (code, out, err) = cli(h, b, &["--isolate", "crashy", "plugins", "doctor"], BOUND);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("    worker: running (pid "), "{out}");
    assert!(out.contains("No problems found."), "{out}");
    let (code, out, err) = cli(
        h,
        b,
        &["--isolate", "crashy", "plugins", "doctor", "--json"],
        BOUND,
    );
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plugin = |k: &str| {
        report["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["key"] == k)
            .unwrap()
            .clone()
    };
    let worker = &plugin("crashy")["worker"];
    assert_eq!(worker["state"], "running");
    assert!(worker["pid"].as_u64().is_some(), "{worker}");
    assert_eq!(worker["crashes"], 0);
    assert_eq!(worker["breaker_crashes"], 3);
    assert!(plugin("fine").get("worker").is_none());
}

#[test]
fn an_agent_turn_with_a_hanging_isolated_tool_goes_on_and_the_process_exits() {
    let hanging = r#"
import time
def hang():
    time.sleep(3600)
def register(ctx):
    ctx.register_tool("hang", {}, hang)
    ctx.register_tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}}, lambda text="": "echo:" + text)
"#;
    let (home, bundled) = setup(&[("sleepy", hanging)]);
    let (h, b) = (home.path(), bundled.path());
    let script = h.join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: hang\n        args: {}\n      - name: echo\n        args: {text: hi}\n  - say: \"after: {tool_results}\"\n",
    )
    .unwrap();
    let started = Instant::now();
    let (code, out, err) = cli(
        h,
        b,
        &[
            "--isolate",
            "sleepy",
            "run",
            "--json",
            "--tool-timeout",
            "1",
            "--session",
            "t",
            "--script",
            script.to_str().unwrap(),
            "go",
        ],
        BOUND,
    );
    assert_eq!(code, 0, "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report}");
    assert_eq!(calls[0]["outcome"], "timed_out", "{report}");
    assert_eq!(calls[1]["outcome"], "ok", "{report}");
    let reply = report["reply"].as_str().unwrap_or_default();
    assert!(
        reply.contains("Error executing hang: timed out after 1 s") && reply.contains("echo:hi"),
        "{report}"
    );
    // The transcript answers every tool call the model made.
    let transcript = std::fs::read_to_string(h.join("sessions/t.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let asked: Vec<String> = lines
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let answered: Vec<String> = lines
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(asked.len(), 2, "{transcript}");
    assert_eq!(asked, answered, "{transcript}");
    assert_eq!(lines.last().unwrap()["role"], "assistant", "{transcript}");
}

const EDIT_IN_PROCESS: &str = r#"
import json
def pre(ctx):
    if ctx.tool_name.startswith("show"):
        ctx.params["in_process"] = "edited"
def register(ctx):
    ctx.register_tool("show_here", {"type": "object"}, lambda **kw: json.dumps(kw, sort_keys=True))
    ctx.register_hook("pre_tool_call", pre)
"#;

const EDIT_ISOLATED: &str = r#"
import json
def pre(ctx):
    if ctx.tool_name.startswith("show"):
        ctx.params["isolated"] = "edited"
def register(ctx):
    ctx.register_tool("show_there", {"type": "object"}, lambda **kw: json.dumps(kw, sort_keys=True))
    ctx.register_hook("pre_tool_call", pre)
"#;

#[test]
fn in_process_and_isolated_hooks_editing_params_both_reach_the_tool() {
    bounded(BOUND, || {
        // Both load orders: the in-process hook first, then the isolated one first.
        for (first, second) in [("a-inproc", "b-iso"), ("b-inproc", "a-iso")] {
            let (inproc, iso) = if first.ends_with("inproc") {
                (first, second)
            } else {
                (second, first)
            };
            let (home, bundled) = setup(&[(inproc, EDIT_IN_PROCESS), (iso, EDIT_ISOLATED)]);
            let host = builder(home.path(), bundled.path())
                .isolate(Isolation::Only(vec![iso.into()]))
                .build()
                .unwrap();
            let rt = rt();
            let want = r#"{"in_process": "edited", "isolated": "edited", "x": 1}"#;
            for tool in ["show_here", "show_there"] {
                let r = rt.block_on(host.call_tool(tool, json!({"x": 1}), ""));
                assert_eq!(r.text, want, "{tool} with {inproc} and {iso} isolated");
            }
        }
    });
}

const HERMES_TOOLS: &str = r#"
import ctypes, json
def lookup(args, **kwargs):
    return json.dumps({"q": args["q"]})
def boom(args, **kwargs):
    raise ValueError("no such word")
def untyped(args, **kwargs):
    return {"not": "a string"}
def register(ctx):
    ctx.register_tool("lookup", "words", {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}, lookup)
    ctx.register_tool("boom", "words", {"name": "boom"}, boom)
    ctx.register_tool("untyped", "words", {"name": "untyped"}, untyped)
    ctx.register_tool("segv", "words", {"name": "segv"}, lambda args, **kw: ctypes.string_at(0))
"#;

#[test]
fn an_isolated_hermes_plugin_keeps_hermes_result_strings() {
    let plughost_home = tempfile::tempdir().unwrap();
    let hermes_home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    std::fs::write(
        hermes_home.path().join("config.yaml"),
        "plugins:\n  enabled: [words]\n",
    )
    .unwrap();
    write_plugin(
        &hermes_home.path().join("plugins"),
        "words",
        "name: words\n",
        &[("__init__.py", HERMES_TOOLS)],
    );
    let call = |isolate: &str, tool: &str, args: &str| {
        let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(["--isolate", isolate, "tools", "call", tool, "--args", args])
            .env("PLUGHOST_HOME", plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes_home.path())
            .env_remove("PLUGHOST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            child.status.code(),
            String::from_utf8_lossy(&child.stdout).into_owned(),
        )
    };
    for (tool, args) in [
        ("lookup", r#"{"q": "abc"}"#),
        ("lookup", r#"{}"#),
        ("boom", "{}"),
        ("untyped", "{}"),
    ] {
        let in_process = call("none", tool, args);
        let isolated = call("words", tool, args);
        assert_eq!(in_process, isolated, "{tool} {args}");
    }
    let (_, boom) = call("words", "boom", "{}");
    let shown: serde_json::Value = serde_json::from_str(boom.trim()).unwrap();
    assert!(
        shown["error"].as_str().unwrap().contains("no such word"),
        "{boom}"
    );
    // A crash shows in Hermes's shape too.
    let (code, segv) = call("words", "segv", "{}");
    assert_eq!(code, Some(1));
    let shown: serde_json::Value = serde_json::from_str(segv.trim()).unwrap();
    assert!(
        shown["error"]
            .as_str()
            .unwrap()
            .contains("plugin 'words' crashed (SIGSEGV)"),
        "{segv}"
    );
}

const HERMES_GUARD: &str = r#"
import json, os
def lookup(args, **kwargs):
    return json.dumps({"q": args["q"], "looked_up": True})
def guard(tool_name, args, **kwargs):
    if args.get("q") == "raise":
        raise RuntimeError("policy store unreachable")
    if args.get("q") == "crash":
        os._exit(3)
    return None
def register(ctx):
    ctx.register_tool("lookup", "words", {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}, lookup)
    ctx.register_hook("pre_tool_call", guard)
"#;

/// Hermes's `pre_tool_call` guards fail closed; isolating the plugin that
/// holds one (to be safe from it) must not open the gate: a raising guard
/// blocks with Hermes's message as in-process, and a guard whose worker
/// crashes blocks too.
#[test]
fn an_isolated_hermes_guard_fails_closed() {
    let plughost_home = tempfile::tempdir().unwrap();
    let hermes_home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    std::fs::write(
        hermes_home.path().join("config.yaml"),
        "plugins:\n  enabled: [guarded]\n",
    )
    .unwrap();
    write_plugin(
        &hermes_home.path().join("plugins"),
        "guarded",
        "name: guarded\n",
        &[("__init__.py", HERMES_GUARD)],
    );
    let call = |isolate: &str, q: &str| {
        let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(["--isolate", isolate, "tools", "call", "lookup", "--args"])
            .arg(format!(r#"{{"q": "{q}"}}"#))
            .env("PLUGHOST_HOME", plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes_home.path())
            .env_remove("PLUGHOST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            child.status.code(),
            String::from_utf8_lossy(&child.stdout).into_owned(),
        )
    };
    for q in ["fine", "raise"] {
        assert_eq!(call("none", q), call("guarded", q), "q={q}");
    }
    let (code, raised) = call("guarded", "raise");
    assert_eq!(code, Some(1), "{raised}");
    assert!(
        raised.contains(
            "pre_tool_call plugin callback guard raised RuntimeError: policy store unreachable"
        ),
        "{raised}"
    );
    assert!(!raised.contains("looked_up"), "{raised}");
    let (code, crashed) = call("guarded", "crash");
    assert_eq!(code, Some(1), "{crashed}");
    assert!(
        crashed.contains("pre_tool_call plugin callback guard raised")
            && crashed.contains("plugin 'guarded' crashed (exit code 3)"),
        "{crashed}"
    );
    assert!(!crashed.contains("looked_up"), "{crashed}");
}

const GATE: &str = r#"
import threading
_started = threading.Event()
_gate = threading.Event()
def wait():
    _started.set()
    return "released" if _gate.wait(30) else "never released"
def release():
    started = _started.wait(30)
    _gate.set()
    return "set" if started else "wait never started"
def reset():
    _started.clear()
    _gate.clear()
    return "reset"
def register(ctx):
    ctx.register_tool("wait", {}, wait)
    ctx.register_tool("release", {}, release)
    ctx.register_tool("reset", {}, reset)
"#;

/// A worker reads the next request while a sync call still runs in it:
/// `wait` blocks until `release` sets its event, and `release` first waits
/// until `wait` has started. Both answer as they should only if each call
/// was served while the other ran, whichever the worker read first. Three
/// rounds: the serving threads change roles each time.
#[test]
fn a_worker_serves_the_next_call_while_a_sync_call_runs() {
    bounded(BOUND, || {
        let (_home, _bundled, host) = isolated_host(&[("gate", GATE)]);
        let host = std::sync::Arc::new(host);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for round in 0..3 {
            let reset = rt.block_on(host.call_tool("reset", json!({}), ""));
            assert_eq!(reset.text, "reset", "round {round}: {reset:?}");
            let (waiting, released) = rt.block_on(async {
                let waiter = {
                    let host = host.clone();
                    tokio::spawn(async move { host.call_tool("wait", json!({}), "").await })
                };
                let released = host.call_tool("release", json!({}), "").await;
                (waiter.await.unwrap(), released)
            });
            assert_eq!(released.text, "set", "round {round}: {released:?}");
            assert_eq!(waiting.text, "released", "round {round}: {waiting:?}");
        }
    });
}
