//! What isolation costs (issues 10 and 26 item 5), in one run, side by
//! side: the latency an isolated tool call adds over the same call
//! in-process — with no hooks, and with a no-op hook on each tool event
//! (`pre_tool_call`, `post_tool_call`, `transform_tool_result`) of the same
//! plugin on its own tool — the worker's start-up time and resident
//! memory, and the time from a crash to the next successful call; the last
//! two against a peer: a bare Python subprocess (the same interpreter)
//! that imports the same plugin and speaks a length-prefixed JSON pipe
//! protocol ([`peer`]).
//!
//! `cargo bench --bench isolation`; `PLUGHOST_BENCH_CALLS` sets the sample
//! size (default 5000), `PLUGHOST_BENCH_STARTS` the number of starts and
//! crashes timed (default 10; medians are printed);
//! `PLUGHOST_BENCH_PROFILE=bare|hooked` runs only that plugin's isolated
//! calls, for a profiler (`perf stat`, `perf record`). Each ratio is printed
//! on a line of its own starting `ratio `, for `benches/run_all.sh`. This
//! executable is its own worker ([`plughost::isolation::serve_if_worker`]).

#[path = "isolation/peer.rs"]
mod peer;

use std::path::Path;
use std::time::{Duration, Instant};

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

/// The added latency target of a bare isolated call (DESIGN.md).
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

/// Seconds per call of `noop` over one round of `calls` calls.
fn round(rt: &tokio::runtime::Runtime, host: &Host, calls: u32) -> f64 {
    let args = json!({"x": 1});
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..calls {
            let r = host.call_tool("noop", args.clone(), "").await;
            assert_eq!(r.text, "ok");
        }
        start.elapsed().as_secs_f64() / calls as f64
    })
}

/// Rounds per host; the hosts take turns, so a change in the machine's
/// load (the scheduler's placement of the threads, a neighbour of the
/// VM) falls on all of them, not on whichever ran then.
const ROUNDS: usize = 7;

/// Seconds per call of each host: a warm-up, then the best of [`ROUNDS`]
/// rounds, taken in turns.
fn per_call_interleaved(rt: &tokio::runtime::Runtime, hosts: &[&Host], calls: u32) -> Vec<f64> {
    for host in hosts {
        round(rt, host, calls.min(500));
    }
    let mut best = vec![f64::MAX; hosts.len()];
    for _ in 0..ROUNDS {
        for (host, best) in hosts.iter().zip(&mut best) {
            *best = best.min(round(rt, host, calls));
        }
    }
    best
}

/// `VmRSS` of a process, in KiB.
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn verdict(ratio: f64, target: f64) -> &'static str {
    if ratio <= target {
        "met"
    } else {
        "MISSED"
    }
}

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The per-call figures, with and without hooks; the added latencies.
fn calls_section(rt: &tokio::runtime::Runtime, work: &Path, empty: &Path, calls: u32) -> [f64; 2] {
    println!(
        "isolated tool calls ({calls} calls per round, best of {ROUNDS}, the four hosts in turns):"
    );
    let mut hosts = Vec::new();
    for (label, plugin) in [("no hooks", BARE), ("3 no-op hooks", HOOKED)] {
        let home = work.join(label.replace(' ', "-"));
        home_with(&home, plugin);
        hosts.push(build(&home, empty, Isolation::None));
        hosts.push(build(&home, empty, Isolation::All));
    }
    let times = per_call_interleaved(rt, &hosts.iter().collect::<Vec<_>>(), calls);
    let mut added = [0.0; 2];
    for (i, label) in ["no hooks", "3 no-op hooks"].into_iter().enumerate() {
        let (inproc, isolated) = (times[2 * i], times[2 * i + 1]);
        added[i] = (isolated - inproc) * 1e6;
        println!(
            "  {label:<14} in-process {:>8.2} µs  isolated {:>8.2} µs  added {:>7.2} µs",
            inproc * 1e6,
            isolated * 1e6,
            added[i]
        );
    }
    let ratio = added[1] / added[0];
    println!(
        "ratio isolated hooks: added latency with 3 hooks / without {ratio:.2}x (target <= 1.3x: {})",
        verdict(ratio, 1.3)
    );
    println!(
        "  bare isolated call added {:.2} µs (target <= {TARGET_ADDED_US} µs: {})",
        added[0],
        verdict(added[0], TARGET_ADDED_US)
    );
    added
}

/// `PLUGHOST_BENCH_PROFILE=bare|hooked`: only that plugin's isolated
/// calls, one round after a warm-up, for a profiler attached to this
/// process and its worker (`perf stat`, `strace -c -f`).
fn profile_one(rt: &tokio::runtime::Runtime, work: &Path, empty: &Path, only: &str, calls: u32) {
    let plugin = if only == "hooked" { HOOKED } else { BARE };
    let home = work.join(only);
    home_with(&home, plugin);
    let host = build(&home, empty, Isolation::All);
    round(rt, &host, 500);
    eprintln!("profile: start");
    let t = round(rt, &host, calls);
    println!("{only}: {:.2} µs a call over {calls} calls", t * 1e6);
}

/// Worker start-ups and crash recoveries, interleaved with the peer's.
fn start_section(rt: &tokio::runtime::Runtime, work: &Path, empty: &Path, starts: u32) {
    let home = work.join("starts");
    home_with(&home, BARE);
    let plugin = home.join("plugins").join("bench");
    let python = peer::python();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut builds, mut resident) = (Vec::new(), None);
    let (mut recover, mut peer_recover) = (Vec::new(), Vec::new());
    for _ in 0..starts {
        let started = Instant::now();
        let host = build(&home, empty, Isolation::All);
        builds.push(started.elapsed());
        let status = host.worker_status("bench").unwrap();
        resident = status.pid.and_then(resident_kib);
        ours.push(peer::time_worker_start(&home, &plugin));
        theirs.push(peer::Peer::start(&python, &plugin).1);
        // One crash each: the first crash in the window has no backoff.
        rt.block_on(host.call_tool("segv", json!({}), ""));
        let crashed = Instant::now();
        let r = rt.block_on(host.call_tool("noop", json!({}), ""));
        assert_eq!(r.text, "ok");
        recover.push(crashed.elapsed());
        peer_recover.push(peer::crash_and_recover(&python, &plugin));
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "worker start ({starts} starts, medians; the peer: {})",
        python.display()
    );
    println!(
        "  worker start (spawn, handshake, plugin loaded) {:.1} ms; peer {:.1} ms; host build with it {:.1} ms; worker resident {} KiB",
        ms(ours),
        ms(theirs),
        ms(median(builds)),
        resident.map_or("?".into(), |k| k.to_string())
    );
    let ratio = ours.as_secs_f64() / theirs.as_secs_f64();
    println!(
        "ratio worker start / bare Python subprocess peer {ratio:.2}x (target <= 1.5x: {})",
        verdict(ratio, 1.5)
    );
    let (recover, peer_recover) = (median(recover), median(peer_recover));
    println!(
        "  crash -> next successful call {:.1} ms; peer {:.1} ms",
        ms(recover),
        ms(peer_recover)
    );
    let ratio = recover.as_secs_f64() / peer_recover.as_secs_f64();
    println!(
        "ratio crash -> next call / peer {ratio:.2}x (target <= 2x: {})",
        verdict(ratio, 2.0)
    );
    repeated_crashes(rt, &home, empty, theirs);
}

/// Restart after a repeated crash (issue 47): two crashes in a row of a
/// worker that served calls, each recovery timed; the second is set
/// beside a bare subprocess start (the peer's median start, `bare`). The
/// backoff is only for a plugin crashing in a loop (workers that answered
/// nothing), so neither waits.
fn repeated_crashes(rt: &tokio::runtime::Runtime, home: &Path, empty: &Path, bare: Duration) {
    let starts = env_number("PLUGHOST_BENCH_STARTS", 10).max(1);
    let mut second = Vec::new();
    let mut shown = Vec::new();
    for _ in 0..starts {
        // A breaker wide enough for the two crashes of each host.
        let host = build(home, empty, Isolation::All);
        let mut recoveries = Vec::new();
        for _ in 0..2 {
            assert_eq!(
                rt.block_on(host.call_tool("noop", json!({}), "")).text,
                "ok"
            );
            rt.block_on(host.call_tool("segv", json!({}), ""));
            let crashed = Instant::now();
            let r = rt.block_on(host.call_tool("noop", json!({}), ""));
            assert_eq!(r.text, "ok");
            recoveries.push(crashed.elapsed());
        }
        shown.push(format!(
            "{:.1}/{:.1} ms",
            ms(recoveries[0]),
            ms(recoveries[1])
        ));
        second.push(recoveries[1]);
    }
    let second = median(second);
    println!(
        "  repeated crashes (first/second recovery per host): {}",
        shown.join(", ")
    );
    println!(
        "  restart after a repeated crash {:.1} ms (median); bare subprocess start {:.1} ms",
        ms(second),
        ms(bare)
    );
    let ratio = second.as_secs_f64() / bare.as_secs_f64();
    println!(
        "ratio restart after a repeated crash / bare subprocess start {ratio:.2}x (target <= 2x: {})",
        verdict(ratio, 2.0)
    );
}

fn main() {
    plughost::isolation::serve_if_worker();
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing
    }
    let calls = env_number("PLUGHOST_BENCH_CALLS", 5000);
    let starts = env_number("PLUGHOST_BENCH_STARTS", 10).max(1);
    let work = tempfile::tempdir().unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Ok(only) = std::env::var("PLUGHOST_BENCH_PROFILE") {
        return profile_one(&rt, work.path(), &empty, &only, calls);
    }
    calls_section(&rt, work.path(), &empty, calls);
    start_section(&rt, work.path(), &empty, starts);
}
