//! The agent loop's own overhead, with the scripted provider (no model
//! time) and one no-op Python hook on every one of the 14 events:
//! per model iteration (a turn that just answers) and per tool call (turns
//! whose one iteration calls a no-op Python tool k times, then answers).

use std::sync::Arc;
use std::time::Instant;

use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::core::hooks::HookEvent;
use plughost::Host;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    let plugin = home.join("plugins/noop");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.yaml"), "name: noop\n").unwrap();
    let hooks: String = HookEvent::ALL
        .iter()
        .map(|e| format!("    ctx.register_hook('{}', lambda c: None)\n", e.name()))
        .collect();
    std::fs::write(
        plugin.join("__init__.py"),
        format!("def register(ctx):\n    ctx.register_tool('noop', {{}}, lambda: 'ok')\n{hooks}"),
    )
    .unwrap();
    std::fs::write(
        home.join("config.json"),
        r#"{"plugins": {"enabled": ["noop"]}}"#,
    )
    .unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let host = Arc::new(
        Host::builder()
            .home(&home)
            .bundled_dir(&empty)
            .build()
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // As a Rust service should: plughost keeps Python thread states on
        // these threads instead of creating one per call.
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();

    let measure = |calls_per_turn: usize, turns: usize| -> f64 {
        let mut script = String::from("turns:\n");
        if calls_per_turn > 0 {
            script.push_str("  - tool_calls:\n");
            for _ in 0..calls_per_turn {
                script.push_str("      - name: noop\n");
            }
        }
        script.push_str("  - say: done\n");
        let provider = Arc::new(Scripted::new(Script::parse(&script, "bench.yaml").unwrap()));
        let agent = Agent::new(host.clone(), provider, AgentConfig::default(), None);
        rt.block_on(async {
            for i in 0..20 {
                agent
                    .send(
                        Inbound::new(&format!("warm-{calls_per_turn}-{i}"), "go"),
                        None,
                    )
                    .await;
            }
            let start = Instant::now();
            for i in 0..turns {
                // A fresh session per turn restarts the script: the same work each time.
                let r = agent
                    .send(Inbound::new(&format!("b-{calls_per_turn}-{i}"), "go"), None)
                    .await;
                assert_eq!(r.reply.as_deref(), Some("done"));
            }
            start.elapsed().as_secs_f64() / turns as f64
        })
    };
    let turns = std::env::var("PLUGHOST_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let one_iteration = measure(0, turns);
    let with_tools = measure(10, turns / 2);
    // A tool turn is two iterations plus ten calls.
    let per_call = (with_tools - 2.0 * one_iteration) / 10.0;
    println!("agent loop overhead (scripted provider, a no-op Python hook on all 14 events):");
    println!("  one-iteration turn (session start/end, gateway, LLM and API events, two transcript writes): {:.1} µs", one_iteration * 1e6);
    println!(
        "  two-iteration turn with 10 no-op Python tool calls: {:.1} µs",
        with_tools * 1e6
    );
    println!("  per tool call inside the loop (dispatch, 3 hooks, blocking-thread hop, transcript write): {:.1} µs", per_call * 1e6);
}
