//! What confinement and a Claude Code command hook cost (issues 50 item 5
//! and 48), side by side in one run:
//!
//! - a worker's start (the host's build with one isolated Flowly plugin),
//!   confined by the kernel (the default) against unconfined (`"sandbox":
//!   false`), the two alternating; medians;
//! - a tool call through the agent loop with one `PreToolUse` command hook
//!   matching it against the same call on a host without the hook, the
//!   hook's bundle in-process and isolated (its hook then runs in the
//!   confined worker): per call, medians of rounds of a scripted turn of
//!   `PLUGHOST_BENCH_CALLS` calls (default 20); and the same call on an
//!   isolated, unconfined worker, so what confinement adds to a call is a
//!   row of its own.
//!
//! `cargo bench --bench confine`; `PLUGHOST_BENCH_STARTS` sets the starts
//! timed (default 15). Each ratio is printed on a line of its own starting
//! `ratio `. This executable is its own worker
//! ([`plughost::isolation::serve_if_worker`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::plugins::config::Isolation;
use plughost::Host;
use serde_json::json;

const TOOL: &str = r#"
def register(ctx):
    ctx.register_tool("noop", {"type": "object", "properties": {}}, lambda: "ok")
"#;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A home with the Flowly plugin `bench` (tool `noop`) and, when `hooked`,
/// the Claude Code plugin `guard` whose PreToolUse hook matches every tool.
fn home(dir: &Path, hooked: bool, sandbox: bool) {
    let p = dir.join("plugins/bench");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("plugin.yaml"), "name: bench\nversion: 1.0\n").unwrap();
    std::fs::write(p.join("__init__.py"), TOOL).unwrap();
    let g = dir.join("plugins/guard");
    std::fs::create_dir_all(g.join(".claude-plugin")).unwrap();
    std::fs::create_dir_all(g.join("hooks")).unwrap();
    std::fs::write(
        g.join(".claude-plugin/plugin.json"),
        json!({"name": "guard", "version": "1.0.0"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        g.join("hooks/hooks.json"),
        json!({"hooks": {"PreToolUse": [{"matcher": "*",
            "hooks": [{"type": "command", "command": "cat > /dev/null"}]}]}})
        .to_string(),
    )
    .unwrap();
    let enabled = if hooked {
        json!(["bench", "guard"])
    } else {
        json!(["bench"])
    };
    let entry = if sandbox {
        json!({})
    } else {
        json!({"sandbox": false})
    };
    std::fs::write(
        dir.join("config.json"),
        json!({"plugins": {"enabled": enabled,
            "entries": {"bench": entry, "guard": entry}}})
        .to_string(),
    )
    .unwrap();
}

fn build(dir: &Path, empty: &Path, isolation: Isolation) -> Host {
    let host = Host::builder()
        .home(dir)
        .bundled_dir(empty)
        .isolate(isolation)
        .build()
        .unwrap();
    for p in host.plugins().iter().filter(|p| p.enabled) {
        assert!(p.loaded, "{}: {:?}", p.key, p.error);
    }
    host
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds per call of one turn of `calls` calls of `noop`.
fn per_call(rt: &tokio::runtime::Runtime, agent: &Agent, calls: usize, session: &str) -> f64 {
    let report = rt.block_on(agent.send(Inbound::new(session, "go"), None));
    assert_eq!(report.tool_calls.len(), calls, "{:?}", report.reply);
    report.timings.total_ms / calls as f64
}

fn agent_for(rt: &tokio::runtime::Runtime, host: Host, calls: usize) -> Agent {
    let turns: String = (0..calls)
        .map(|_| "  - tool_calls:\n      - name: noop\n        args: {}\n".to_string())
        .collect();
    let script = format!("turns:\n{turns}  - say: done\n");
    let provider = Arc::new(Scripted::new(Script::parse(&script, "bench.yaml").unwrap()));
    let _g = rt.enter();
    let config = AgentConfig {
        max_iterations: calls + 5,
        ..AgentConfig::default()
    };
    Agent::new(Arc::new(host), provider, config, None)
}

fn main() {
    plughost::isolation::serve_if_worker();
    let missing = plughost::isolation::sandbox::support().missing();
    if !missing.is_empty() {
        println!("note: this kernel cannot enforce {missing:?}: the confined rows confine less");
    }
    let starts = env_number("PLUGHOST_BENCH_STARTS", 15);
    let calls = env_number("PLUGHOST_BENCH_CALLS", 20);
    let empty = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // 1. A worker's start, confined and not, alternating.
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    home(dirs[0].path(), false, false);
    home(dirs[1].path(), false, true);
    let mut start = [Vec::new(), Vec::new()];
    for round in 0..starts + 1 {
        for i in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            let host = build(dirs[i].path(), empty.path(), Isolation::All);
            let took = t.elapsed().as_secs_f64() * 1e3;
            drop(host);
            if round > 0 {
                start[i].push(took);
            }
        }
    }
    let [s0, s1] = start.map(median);
    println!("worker start, unconfined: {s0:.1} ms (median of {starts})");
    println!("worker start, confined:   {s1:.1} ms");
    println!("ratio worker_start_confined_over_unconfined {:.2}", s1 / s0);

    // 2. A tool call with one PreToolUse command hook, and without.
    // (label, hooked, isolation, confined)
    let rows = [
        ("in-process, no hook", false, Isolation::None, true),
        (
            "in-process, one PreToolUse hook",
            true,
            Isolation::None,
            true,
        ),
        (
            "isolated and confined, no hook",
            false,
            Isolation::All,
            true,
        ),
        (
            "isolated and confined, one PreToolUse hook",
            true,
            Isolation::All,
            true,
        ),
        (
            "isolated, unconfined, no hook",
            false,
            Isolation::All,
            false,
        ),
    ];
    let agents: Vec<(tempfile::TempDir, Agent)> = rows
        .iter()
        .map(|(_, hooked, isolation, confined)| {
            let dir = tempfile::tempdir().unwrap();
            home(dir.path(), *hooked, *confined);
            let host = build(dir.path(), empty.path(), isolation.clone());
            let agent = agent_for(&rt, host, calls);
            (dir, agent)
        })
        .collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    for round in 0..12 {
        for (i, (_, agent)) in agents.iter().enumerate() {
            let ms = per_call(&rt, agent, calls, &format!("r{round}"));
            if round > 1 {
                times[i].push(ms);
            }
        }
    }
    let per: Vec<f64> = times.into_iter().map(median).collect();
    for ((label, _, _, _), ms) in rows.iter().zip(&per) {
        println!("a call, {label}: {ms:.3} ms");
    }
    println!(
        "ratio call_with_pre_tool_use_hook_over_without {:.2} (+{:.3} ms per hook)",
        per[1] / per[0],
        per[1] - per[0]
    );
    println!(
        "ratio confined_call_with_pre_tool_use_hook_over_without {:.2} (+{:.3} ms per hook)",
        per[3] / per[2],
        per[3] - per[2]
    );
    println!("ratio confined_call_over_in_process {:.2}", per[2] / per[0]);
    println!(
        "ratio confined_call_over_unconfined_isolated_call {:.2} ({:+.3} ms per call)",
        per[2] / per[4],
        per[2] - per[4]
    );
    for (_, agent) in agents {
        rt.block_on(agent.shutdown());
    }
}
