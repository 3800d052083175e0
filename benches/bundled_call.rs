//! What the bundled plugins cost a tool call (issue 26, item 2), in one
//! run: the same sync Python tool called through a host with plughost's
//! defaults (the built-in bundled plugins on: command-guard, disk-cleanup,
//! tool-audit and the web backends) and through one with them off, side by
//! side, and 1,000 concurrent 50 ms calls through each.
//!
//! `cargo bench --bench bundled_call`; `PLUGHOST_BENCH_CALLS` sets the
//! per-round sample size (default 20000). The rounds alternate between the
//! two hosts and each figure is the best round, so a busy machine slows
//! both alike. The audit trail goes to the default host's temporary home.
//! `PLUGHOST_BENCH_BUNDLED_DIR` runs the "defaults" host on another copy of
//! the bundled plugins (an older checkout's `plugins_bundled/`, to compare).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plughost::Host;
use serde_json::json;

const PLUGIN: &str = r#"
import asyncio

def register(ctx):
    async def sleep50():
        await asyncio.sleep(0.05)
        return "ok"
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    ctx.register_tool("sync_noop", schema, lambda x=0: "ok")
    ctx.register_tool("sleep50", {}, sleep50)
"#;

/// The target of issue 26: defaults ≤ 1.5× the bundled-off call.
const TARGET: f64 = 1.5;
const ROUNDS: usize = 5;

fn home_with_plugin(dir: &Path) {
    let p = dir.join("plugins").join("bench");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("plugin.yaml"), "name: bench\n").unwrap();
    std::fs::write(p.join("__init__.py"), PLUGIN).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"plugins": {"enabled": ["bench"]}}"#,
    )
    .unwrap();
}

fn per_call(rt: &tokio::runtime::Runtime, host: &Host, calls: u32) -> f64 {
    let args = json!({"x": 1});
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..calls {
            let r = host.call_tool("sync_noop", args.clone(), "").await;
            debug_assert_eq!(r.text, "ok");
        }
        start.elapsed().as_secs_f64() / calls as f64
    })
}

fn concurrent(rt: &tokio::runtime::Runtime, host: &Arc<Host>) -> Duration {
    let start = Instant::now();
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..1000 {
            let host = host.clone();
            set.spawn(async move { host.call_tool("sleep50", json!({}), "").await });
        }
        while let Some(r) = set.join_next().await {
            assert_eq!(r.unwrap().text, "ok");
        }
    });
    start.elapsed()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing; nothing to list
    }
    let calls: u32 = std::env::var("PLUGHOST_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let work = tempfile::tempdir().unwrap();
    let (on_home, off_home) = (work.path().join("on"), work.path().join("off"));
    home_with_plugin(&on_home);
    home_with_plugin(&off_home);
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();

    let mut builder = Host::builder().home(&on_home);
    if let Some(dir) = std::env::var_os("PLUGHOST_BENCH_BUNDLED_DIR") {
        builder = builder.bundled_dir(dir);
    }
    let defaults = Arc::new(builder.build().unwrap());
    let bare = Arc::new(
        Host::builder()
            .home(&off_home)
            .bundled_dir(&empty)
            .build()
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();

    // Warm both (first calls import, compile, open the audit log).
    per_call(&rt, &defaults, 1000);
    per_call(&rt, &bare, 1000);
    let (mut on, mut off) = (f64::MAX, f64::MAX);
    let (mut on_c, mut off_c) = (Duration::MAX, Duration::MAX);
    for round in 0..ROUNDS {
        on = on.min(per_call(&rt, &defaults, calls));
        off = off.min(per_call(&rt, &bare, calls));
        if round < 3 {
            on_c = on_c.min(concurrent(&rt, &defaults));
            off_c = off_c.min(concurrent(&rt, &bare));
        }
    }
    drop(defaults); // writes the audit trail out
    let audited = std::fs::read_to_string(on_home.join("tool-audit/calls.jsonl"))
        .map(|s| s.lines().count())
        .unwrap_or(0);

    println!("bundled plugins and a tool call ({calls} calls a round, best of {ROUNDS} rounds)");
    println!("                                  defaults   bundled off");
    println!(
        "sync tool call                  {:>10.2} µs {:>10.2} µs",
        on * 1e6,
        off * 1e6
    );
    println!(
        "1000 × sleep(50 ms) wall        {:>10.1} ms {:>10.1} ms",
        on_c.as_secs_f64() * 1e3,
        off_c.as_secs_f64() * 1e3
    );
    println!("audit records written by the default host: {audited}");
    println!();
    let ratio = on / off;
    let verdict = if ratio <= TARGET { "met" } else { "MISSED" };
    println!(
        "{:<58} {ratio:>7.3}×  (target ≤ {TARGET}×, {verdict})",
        "sync tool call, defaults vs bundled off"
    );
    println!(
        "{:<58} {:>7.3}×  (no target; for scale)",
        "1000 concurrent 50 ms calls, defaults vs bundled off",
        on_c.as_secs_f64() / off_c.as_secs_f64()
    );
}
