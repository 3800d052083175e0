//! Side-by-side benchmarks: plughost against the pure-Python reference host
//! (`benches/reference_host.py`) and the direct-call floor, in one run.
//!
//! `cargo bench` prints each figure and the ratio to its target (DESIGN.md).
//! Set `PLUGHOST_BENCH_CALLS` to change the per-call sample size.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plughost::core::hooks::{HookAction, HookEvent, HookPayload};
use plughost::{Host, Tool};
use serde_json::{json, Value};

const BENCH_PLUGIN: &str = r#"
import asyncio

def register(ctx):
    def sync_noop(x: int = 0):
        return "ok"
    async def async_noop(x: int = 0):
        return "ok"
    async def sleep50():
        await asyncio.sleep(0.05)
        return "ok"
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    ctx.register_tool("sync_noop", schema, sync_noop)
    ctx.register_tool("async_noop", schema, async_noop)
    ctx.register_tool("sleep50", {}, sleep50)
    ctx.register_hook("pre_tool_call", lambda c: None)
    ctx.register_hook("post_tool_call", lambda c: None)
    ctx.register_hook("transform_tool_result", lambda c: None)
"#;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn write_plugin(dir: &Path, name: &str, init: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("plugin.yaml"), format!("name: {name}\n")).unwrap();
    std::fs::write(p.join("__init__.py"), init).unwrap();
}

fn per_call(rt: &tokio::runtime::Runtime, host: &Host, name: &str, calls: u32) -> f64 {
    let args = json!({"x": 1});
    rt.block_on(async {
        for _ in 0..calls.min(1000) {
            host.call_tool(name, args.clone(), "").await;
        }
        let start = Instant::now();
        for _ in 0..calls {
            let r = host.call_tool(name, args.clone(), "").await;
            debug_assert_eq!(r.text, "ok");
        }
        start.elapsed().as_secs_f64() / calls as f64
    })
}

fn report(label: &str, ours: f64, theirs: f64, target: f64) {
    let ratio = ours / theirs;
    let verdict = if ratio <= target { "met" } else { "MISSED" };
    println!("{label:<58} {ratio:>7.3}×  (target ≤ {target}×, {verdict})");
}

fn micros(s: f64) -> String {
    format!("{:.2} µs", s * 1e6)
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
    let home = work.path().join("home");
    let plugins = home.join("plugins");
    write_plugin(&plugins, "bench", BENCH_PLUGIN);
    std::fs::write(
        home.join("config.json"),
        r#"{"plugins": {"enabled": ["bench"]}}"#,
    )
    .unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();

    // ── The Python reference, one process, same plugin ──
    let reference = Command::new("python3")
        .arg(root().join("benches/reference_host.py"))
        .arg(plugins.join("bench"))
        .arg(root().join("python/plughost/_compat"))
        .arg(calls.to_string())
        .output()
        .expect("python3 runs the reference host");
    assert!(
        reference.status.success(),
        "reference host failed: {}",
        String::from_utf8_lossy(&reference.stderr)
    );
    let py: Value = serde_json::from_slice(&reference.stdout).unwrap();
    let f = |k: &str| py[k].as_f64().unwrap();

    // ── plughost ──
    let host = Host::builder()
        .home(&home)
        .bundled_dir(&empty)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sync = per_call(&rt, &host, "sync_noop", calls);
    let asyn = per_call(&rt, &host, "async_noop", calls);

    let host = Arc::new(host);
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // As a Rust service should: plughost keeps Python thread states on
        // these threads instead of creating one per call.
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    let mut gather = Duration::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        mt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..1000 {
                let host = host.clone();
                set.spawn(async move { host.call_tool("sleep50", json!({}), "").await });
            }
            while let Some(r) = set.join_next().await {
                assert_eq!(r.unwrap().text, "ok");
            }
        });
        gather = gather.min(start.elapsed());
    }

    println!("plughost benchmarks ({calls} calls each; one no-op Python hook on each tool hook)");
    println!(
        "reference host validates with jsonschema: {}",
        py["validated"]
    );
    println!();
    println!(
        "per call                         plughost   python-host  py-host-novalidate  direct-floor"
    );
    println!(
        "sync handler                  {:>11} {:>13} {:>19} {:>13}",
        micros(sync),
        micros(f("sync")),
        micros(f("sync_no_validation")),
        micros(f("sync_floor"))
    );
    println!(
        "async handler (no suspend)    {:>11} {:>13} {:>19} {:>13}",
        micros(asyn),
        micros(f("async")),
        micros(f("async_no_validation")),
        micros(f("async_floor"))
    );
    println!(
        "1000 × sleep(50 ms) wall      {:>11} {:>13}  (asyncio.gather of the bare coroutines)",
        format!("{:.1} ms", gather.as_secs_f64() * 1e3),
        format!("{:.1} ms", f("gather_1000") * 1e3)
    );
    println!();
    report("sync handler vs python host", sync, f("sync"), 0.25);
    report(
        "sync handler vs python host without validation",
        sync,
        f("sync_no_validation"),
        0.25,
    );
    report("async handler vs python host", asyn, f("async"), 1.0);
    report(
        "async handler vs python host without validation",
        asyn,
        f("async_no_validation"),
        1.0,
    );
    report(
        "1000 concurrent 50 ms sleeps vs asyncio.gather",
        gather.as_secs_f64(),
        f("gather_1000"),
        1.1,
    );

    real_flowly(sync, asyn, calls);
    native_hook_cost(&rt, &empty);
    registry_lookup();
    cold_start(work.path(), &empty);
}

/// plughost's calls against real Flowly's `ToolRegistry.execute` with the
/// same three hooks (`benches/flowly_real.py`, run by the interpreter
/// `PLUGHOST_BENCH_FLOWLY_PYTHON` names, one with the `flowly-ai`
/// distribution installed); skipped, saying so, without one.
fn real_flowly(sync: f64, asyn: f64, calls: u32) {
    println!();
    let Some(python) = std::env::var_os("PLUGHOST_BENCH_FLOWLY_PYTHON") else {
        println!("vs real Flowly: skipped (set PLUGHOST_BENCH_FLOWLY_PYTHON to a Python with flowly-ai installed)");
        return;
    };
    let out = Command::new(python)
        .arg(root().join("benches/flowly_real.py"))
        .arg(calls.to_string())
        .output()
        .expect("the interpreter of PLUGHOST_BENCH_FLOWLY_PYTHON runs");
    assert!(
        out.status.success(),
        "benches/flowly_real.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flowly: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = |k: &str| flowly[k].as_f64().unwrap();
    println!(
        "real Flowly {} ToolRegistry.execute, 3 hooks: sync {} async {}",
        flowly["flowly"].as_str().unwrap_or("?"),
        micros(f("sync")),
        micros(f("async"))
    );
    report(
        "sync handler vs real Flowly (3 hooks)",
        sync,
        f("sync"),
        0.1,
    );
    report(
        "async handler vs real Flowly (3 hooks)",
        asyn,
        f("async"),
        0.1,
    );
    // What bounds the two rows above: the plugin's four functions alone,
    // called as cheaply as any host could (benches/flowly_real.py, `floor`).
    println!(
        "floor (a ToolHookContext, three hooks and the handler called directly): sync {} ({:.3}x real Flowly), async {} ({:.3}x)",
        micros(f("sync_floor")),
        f("sync_floor") / f("sync"),
        micros(f("async_floor")),
        f("async_floor") / f("async")
    );
    println!(
        "plughost above that floor: sync {}, async {}",
        micros(sync - f("sync_floor")),
        micros(asyn - f("async_floor"))
    );
}

/// Marginal cost of one native Rust hook: a native tool with three no-op
/// native hooks against the same tool with none.
fn native_hook_cost(rt: &tokio::runtime::Runtime, empty: &Path) {
    let build = |hooks: bool| {
        let home = tempfile::tempdir().unwrap();
        let mut b = Host::builder()
            .home(home.path())
            .bundled_dir(empty)
            .tool(Tool::from_fn("n", "", json!({"type": "object"}), |_| {
                Ok("ok".into())
            }));
        if hooks {
            for e in [
                HookEvent::ToolGuard,
                HookEvent::ToolDone,
                HookEvent::ResultRewrite,
            ] {
                b = b.hook(e, |_e: HookEvent, _p: HookPayload<'_>| HookAction::Continue);
            }
        }
        b.build().unwrap()
    };
    let (bare, hooked) = (build(false), build(true));
    let n = 200_000u32;
    let time = |h: &Host| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..n {
                std::hint::black_box(h.call_tool("n", Value::Null, "").await);
            }
            start.elapsed().as_secs_f64() / n as f64
        })
    };
    let (mut b, mut h) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        b = b.min(time(&bare));
        h = h.min(time(&hooked));
    }
    let per_hook = ((h - b) / 3.0).max(0.0);
    println!();
    println!(
        "native tool call, no hooks: {:.0} ns; with 3 native hooks: {:.0} ns",
        b * 1e9,
        h * 1e9
    );
    let verdict = if per_hook <= 50e-9 { "met" } else { "MISSED" };
    println!(
        "{:<58} {:>7.1} ns (target ≤ 50 ns, {verdict})",
        "native Rust hook, marginal cost each",
        per_hook * 1e9
    );
}

/// Tool lookup time with 10 and with 100,000 registered tools.
fn registry_lookup() {
    let mut small = plughost::core::registry::Registry::new();
    let mut large = plughost::core::registry::Registry::new();
    for i in 0..100_000 {
        let t = Tool::from_fn(&format!("tool_{i}"), "", json!({}), |_| Ok(String::new()));
        if i < 10 {
            small.add_tool(t.clone());
        }
        large.add_tool(t);
    }
    let time = |r: &plughost::core::registry::Registry| {
        let start = Instant::now();
        for i in 0..1_000_000u32 {
            std::hint::black_box(r.tool(if i % 2 == 0 { "tool_7" } else { "tool_3" }));
        }
        start.elapsed().as_secs_f64() / 1e6
    };
    let (s, l) = (time(&small), time(&large));
    println!(
        "registry lookup: {:.1} ns with 10 tools, {:.1} ns with 100,000 tools (ratio {:.2}: O(1))",
        s * 1e9,
        l * 1e9,
        l / s
    );
}

/// `plughost plugins list` against `python -c pass`, bare and with 100
/// enabled user plugins (one tool and one hook each).
fn cold_start(work: &Path, empty: &Path) {
    let bin = env!("CARGO_BIN_EXE_plughost");
    let bare_home = work.join("cold-bare");
    std::fs::create_dir_all(&bare_home).unwrap();
    let many_home = work.join("cold-100");
    let mut enabled = Vec::new();
    for i in 0..100 {
        let name = format!("p{i:03}");
        write_plugin(
            &many_home.join("plugins"),
            &name,
            &format!(
                "def register(ctx):\n    ctx.register_tool('tool_{i}', {{'type': 'object', 'properties': {{'q': {{'type': 'string'}}}}}}, lambda q='': q)\n    ctx.register_hook('post_tool_call', lambda c: None)\n"
            ),
        );
        enabled.push(name);
    }
    std::fs::write(
        many_home.join("config.json"),
        json!({"plugins": {"enabled": enabled}}).to_string(),
    )
    .unwrap();
    // One run first so the plugins' bytecode caches exist, as on a used machine.
    for home in [&bare_home, &many_home] {
        let ok = Command::new(bin)
            .args(["plugins", "list"])
            .env("PLUGHOST_HOME", home)
            .env("PLUGHOST_BUNDLED_DIR", empty)
            .env_remove("PYTHONDONTWRITEBYTECODE")
            .output()
            .unwrap();
        assert!(ok.status.success());
    }
    let runs = std::env::var("PLUGHOST_BENCH_COLD_RUNS").unwrap_or_else(|_| "15".into());
    let out = Command::new("python3")
        .arg(root().join("benches/coldstart.py"))
        .arg(&runs)
        .arg("--")
        .args(["python3", "-c", "pass", "---"])
        .args([
            "env",
            &format!("PLUGHOST_HOME={}", bare_home.display()),
            &format!("PLUGHOST_BUNDLED_DIR={}", empty.display()),
            bin,
            "plugins",
            "list",
            "---",
        ])
        .args([
            "env",
            &format!("PLUGHOST_HOME={}", many_home.display()),
            &format!("PLUGHOST_BUNDLED_DIR={}", empty.display()),
            bin,
            "plugins",
            "list",
            "---",
        ])
        .args([
            "env",
            &format!("PLUGHOST_HOME={}", work.join("cold-default").display()),
            bin,
            "plugins",
            "list",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let med = |i: usize| v[i]["median_s"].as_f64().unwrap();
    let rss = |i: usize| {
        v[i]["max_rss_kib"]
            .as_f64()
            .map(|k| k / 1024.0)
            .unwrap_or(f64::NAN)
    };
    println!();
    println!("cold start (median of {runs} runs):");
    println!(
        "  python -c pass                          {:>7.1} ms  {:>5.1} MiB",
        med(0) * 1e3,
        rss(0)
    );
    println!(
        "  plughost plugins list (no plugins)      {:>7.1} ms  {:>5.1} MiB",
        med(1) * 1e3,
        rss(1)
    );
    println!(
        "  plughost plugins list (bundled plugins) {:>7.1} ms  {:>5.1} MiB",
        med(3) * 1e3,
        rss(3)
    );
    println!(
        "  plughost plugins list (100 plugins)     {:>7.1} ms  {:>5.1} MiB",
        med(2) * 1e3,
        rss(2)
    );
    report(
        "cold start, bundled plugins vs python -c pass",
        med(3),
        med(0),
        2.0,
    );
    report(
        "cold start, 100 user plugins vs python -c pass",
        med(2),
        med(0),
        4.0,
    );
    let verdict = if rss(2) <= 30.0 { "met" } else { "MISSED" };
    println!(
        "{:<58} {:>7.1} MiB (target ≤ 30 MiB, {verdict})",
        "peak memory with 100 plugins",
        rss(2)
    );
}
