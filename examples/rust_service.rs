//! A Rust service that hosts Python plugins beside its own Rust tools.
//!
//! Run: `cargo run --example rust_service`
//!
//! It builds a host over a throw-away home holding one user plugin written in
//! Python (run isolated, in a worker process of its own), registers a native
//! Rust tool and a native Rust hook, then calls
//! tools (Python and Rust) through the full pipeline, runs a scripted agent
//! turn, fires an event, runs a slash command and reads a skill.

use std::sync::Arc;

use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::core::hooks::{HookAction, HookEvent, HookPayload, SessionContext};
use plughost::{Host, Tool};
use serde_json::json;

const WEATHER_PLUGIN: &str = r#"
from flowly.agent.hooks import BlockAction

def register(ctx):
    async def forecast(city: str) -> str:
        return f"Sunny in {city}"

    ctx.register_tool(
        "forecast",
        {"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        forecast,
        description="Tomorrow's forecast for a city",
    )
    ctx.register_hook(
        "pre_tool_call",
        lambda c: BlockAction("no forecasts for Atlantis") if c.params.get("city") == "Atlantis" else None,
    )
    ctx.register_hook("on_session_end", lambda c: print(f"[python] session {c.session_id} ended"))
    ctx.register_command("weather", lambda args: f"Try: forecast {args or '<city>'}", description="Weather help")
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This executable also serves isolated plugins: plughost starts it again
    // as a worker process for each one (first thing in `main`, before any
    // runtime starts).
    plughost::isolation::serve_if_worker();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::tempdir()?;
    let plugin = home.path().join("plugins").join("weather");
    std::fs::create_dir_all(&plugin)?;
    std::fs::write(
        plugin.join("plugin.yaml"),
        "name: weather\nversion: 0.1.0\n",
    )?;
    std::fs::write(plugin.join("__init__.py"), WEATHER_PLUGIN)?;

    let host = Host::builder()
        .home(home.path())
        .enable(["weather"]) // user plugins are opt-in; this enables it for this host only
        // Run it in a worker process of its own: a crash, `os._exit` or a
        // spin in the plugin fails only its calls, never this service.
        .isolate(plughost::plugins::config::Isolation::Only(vec!["weather".into()]))
        .tool(Tool::from_fn(
            "add",
            "Add two numbers",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            |args| Ok((args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)).to_string()),
        ))
        .hook(HookEvent::ToolDone, |_event: HookEvent, payload: HookPayload<'_>| {
            if let HookPayload::Tool(call) = payload {
                println!("[rust] {} took {:.3} ms", call.tool_name, call.duration_ms);
            }
            HookAction::Continue
        })
        .build()?;

    for plugin in &host.plugins() {
        println!(
            "plugin {} ({}): loaded={} {:?}",
            plugin.key,
            plugin.source.as_str(),
            plugin.loaded,
            plugin.error
        );
    }
    println!(
        "{}",
        host.call_tool("forecast", json!({"city": "Oslo"}), "demo")
            .await
            .text
    );
    println!(
        "{}",
        host.call_tool("forecast", json!({"city": "Atlantis"}), "demo")
            .await
            .text
    );
    println!(
        "{}",
        host.call_tool("add", json!({"a": 2, "b": 40}), "demo")
            .await
            .text
    );
    println!(
        "{}",
        host.call_tool("audit_summary", json!({}), "demo")
            .await
            .text
    );
    println!("{:?}", host.run_command("/weather Paris").await?);
    println!(
        "{}",
        host.skill("tool-audit:reading-the-audit")?
            .lines()
            .nth(4)
            .unwrap_or_default()
    );

    // The agent loop over the same host: one scripted turn that calls the
    // Python tool (the native hook above sees it) and answers.
    let host = Arc::new(host);
    let script = Script::parse(
        "turns:\n  - tool_calls:\n      - name: forecast\n        args: {city: Bergen}\n  - say: \"Forecast: {tool_results}\"\n",
        "service.yaml",
    )?;
    let agent = Agent::new(
        host.clone(),
        Arc::new(Scripted::new(script)),
        AgentConfig::default(),
        None,
    );
    let report = agent
        .send(Inbound::new("service-1", "weather in Bergen?"), None)
        .await;
    println!("agent: {}", report.reply.unwrap_or_default());
    agent.shutdown().await;

    let mut session = SessionContext {
        session_id: "demo".into(),
        completed: true,
        ..Default::default()
    };
    host.fire(HookEvent::TurnClosed, HookPayload::Session(&mut session))
        .await;
    Ok(())
}
