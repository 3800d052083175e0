//! What isolation costs (issue 10), in one run: the latency an isolated
//! tool call adds over the same call in-process — with no hooks, and with
//! a no-op hook on each tool event in the same plugin — the worker's
//! start-up time and resident memory, and the time from a crash to the
//! next successful call.
//!
//! `cargo bench --bench isolation`; `PLUGHOST_BENCH_CALLS` sets the sample
//! size (default 5000). This executable is its own worker
//! ([`plughost::isolation::serve_if_worker`]).

use std::path::Path;
use std::time::Instant;

use plughost::plugins::config::Isolation;
use plughost::Host;
use serde_json::json;

const BARE: &str = r#"
import ctypes
def register(ctx):
    ctx.register_tool("noop", {"type": "object", "properties": {"x": {"type": "integer"}}}, lambda x=0: "ok")
    ctx.register_tool("segv", {}, lambda: ctypes.string_at(0))
"#;

const HOOKED: &str = r#"
def register(ctx):
    ctx.register_tool("noop", {"type": "object", "properties": {"x": {"type": "integer"}}}, lambda x=0: "ok")
    ctx.register_hook("pre_tool_call", lambda c: None)
    ctx.register_hook("post_tool_call", lambda c: None)
    ctx.register_hook("transform_tool_result", lambda c: None)
"#;

/// The added latency target (DESIGN.md).
const TARGET_ADDED_US: f64 = 50.0;

fn home_with(dir: &Path, plugin: &str) {
    let p = dir.join("plugins").join("bench");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("plugin.yaml"), "name: bench\n").unwrap();
    std::fs::write(p.join("__init__.py"), plugin).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"plugins": {"enabled": ["bench"]}}"#,
    )
    .unwrap();
}

fn build(home: &Path, empty: &Path, isolation: Isolation) -> Host {
    Host::builder()
        .home(home)
        .bundled_dir(empty)
        .isolate(isolation)
        .build()
        .unwrap()
}

/// Seconds per call of `noop`, after a warm-up; the best of three rounds.
fn per_call(rt: &tokio::runtime::Runtime, host: &Host, calls: u32) -> f64 {
    let args = json!({"x": 1});
    rt.block_on(async {
        for _ in 0..calls.min(500) {
            host.call_tool("noop", args.clone(), "").await;
        }
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..calls {
                let r = host.call_tool("noop", args.clone(), "").await;
                assert_eq!(r.text, "ok");
            }
            best = best.min(start.elapsed().as_secs_f64() / calls as f64);
        }
        best
    })
}

/// `VmRSS` of a process, in KiB.
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn main() {
    plughost::isolation::serve_if_worker();
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing
    }
    let calls: u32 = std::env::var("PLUGHOST_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let work = tempfile::tempdir().unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    println!("isolated tool calls ({calls} calls per round, best of 3):");
    for (label, plugin) in [("no hooks", BARE), ("3 no-op hooks", HOOKED)] {
        let home = work.path().join(label.replace(' ', "-"));
        home_with(&home, plugin);
        let inproc = per_call(&rt, &build(&home, &empty, Isolation::None), calls);
        let started = Instant::now();
        let host = build(&home, &empty, Isolation::All);
        let startup = started.elapsed();
        let isolated = per_call(&rt, &host, calls);
        let added = (isolated - inproc) * 1e6;
        let verdict = match label {
            "no hooks" if added <= TARGET_ADDED_US => " (target ≤ 50 µs: met)",
            "no hooks" => " (target ≤ 50 µs: MISSED)",
            _ => "",
        };
        println!(
            "  {label:<14} in-process {:>8.2} µs  isolated {:>8.2} µs  added {added:>7.2} µs{verdict}",
            inproc * 1e6,
            isolated * 1e6
        );
        if plugin == BARE {
            let pid = host.worker_status("bench").and_then(|s| s.pid).unwrap();
            println!(
                "  worker start-up (host build, plugin loaded) {:.1} ms; worker resident memory {} KiB",
                startup.as_secs_f64() * 1e3,
                resident_kib(pid).map_or("?".into(), |k| k.to_string())
            );
            let mut recoveries = Vec::new();
            // Two crashes: the breaker (3 within 60 s) stays closed.
            for _ in 0..2 {
                rt.block_on(host.call_tool("segv", json!({}), ""));
                let crashed = Instant::now();
                let r = rt.block_on(host.call_tool("noop", json!({}), ""));
                assert_eq!(r.text, "ok");
                recoveries.push(crashed.elapsed());
            }
            println!(
                "  crash -> next successful call: {} (target ≤ 1 s)",
                recoveries
                    .iter()
                    .map(|d| format!("{:.0} ms", d.as_secs_f64() * 1e3))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}
