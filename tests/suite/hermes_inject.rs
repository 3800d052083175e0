//! `ctx.inject_message` reaches the session whose turn called it: two
//! sessions run at once through one agent, one of them injects while the
//! other is between model calls, and only the injecting session's
//! conversation gets the message.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::tools::{self, DelegateSlot};
use plughost::agent::{Agent, AgentConfig, Inbound, TurnReport};
use serde_json::Value;

/// A Hermes plugin whose `step` tool, called by session "A", injects a
/// message and then holds until session "B" has made its next model call
/// (B calls `release` there); called by "B", it waits for A's injection.
/// So B's second model call happens after the injection and before A's.
const RELAY: &str = r#"
import threading
from tools.registry import registry

_CTX = None
_injected = threading.Event()
_released = threading.Event()

def step(args, **kwargs):
    if args.get("who") == "A":
        queued = _CTX.inject_message("note for A only")
        _injected.set()
        _released.wait(30)
        return "A queued=%s" % queued
    _injected.wait(30)
    return "B saw A inject"

def release(args, **kwargs):
    _released.set()
    return "released"

def route(args, **kwargs):
    if args.get("who") == "sub task":
        return "sub queued=%s" % _CTX.inject_message("note from the sub-agent")
    return "not injected"

def register(ctx):
    global _CTX
    _CTX = ctx
    obj = {"type": "object", "properties": {"who": {"type": "string"}}}
    ctx.register_tool("step", "relay", {"name": "step", "parameters": obj}, step)
    ctx.register_tool("release", "relay", {"name": "release", "parameters": obj}, release)
    ctx.register_tool("route", "relay", {"name": "route", "parameters": obj}, route)
"#;

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: step
        args: {who: "{user_message}"}
  - tool_calls:
      - name: release
        args: {}
  - say: "done"
"#;

fn user_texts(report: &TurnReport) -> Vec<String> {
    report
        .messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect()
}

fn agent_over(
    home: &std::path::Path,
    script: &str,
    rt: &tokio::runtime::Runtime,
) -> (Agent, tempfile::TempDir) {
    let bundled = no_bundled();
    let slot = DelegateSlot::default();
    let host = crate::common::builder()
        .home(home)
        .bundled_dir(bundled.path())
        .tool(tools::delegate_tool(&slot))
        .build()
        .unwrap();
    let pinned_plugins = host.plugins();
    let loaded: Vec<&str> = pinned_plugins
        .iter()
        .filter(|p| p.loaded)
        .map(|p| p.key.as_str())
        .collect();
    assert_eq!(loaded, ["relay"], "{:?}", host.plugins());
    let provider = Arc::new(Scripted::new(Script::parse(script, "test.yaml").unwrap()));
    let config = AgentConfig::default();
    let _g = rt.enter();
    let agent = Agent::new(Arc::new(host), provider, config, Some(&slot));
    (agent, bundled)
}

fn plugin_home() -> tempfile::TempDir {
    let home = home_with(&["relay"]);
    write_plugin(
        &home.path().join("plugins"),
        "relay",
        "name: relay\n",
        &[("__init__.py", RELAY)],
    );
    home
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_injected_message_joins_only_the_conversation_of_the_session_that_injected() {
    let home = plugin_home();
    let rt = runtime();
    let (agent, _bundled) = agent_over(home.path(), SCRIPT, &rt);
    let (a, b) = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            tokio::join!(
                agent.send(Inbound::new("session-a", "A"), None),
                agent.send(Inbound::new("session-b", "B"), None),
            )
        })
        .await
        .expect("both turns finished")
    });
    assert_eq!(a.reply.as_deref(), Some("done"), "{a:#?}");
    assert_eq!(b.reply.as_deref(), Some("done"), "{b:#?}");
    let tool_results = |r: &TurnReport| -> Vec<Value> {
        r.tool_calls
            .iter()
            .map(|c| c.result.clone().into())
            .collect()
    };
    assert!(
        tool_results(&a).contains(&Value::from("A queued=True")),
        "{a:#?}"
    );
    assert_eq!(user_texts(&a), ["A", "note for A only"], "{a:#?}");
    assert_eq!(user_texts(&b), ["B"], "{b:#?}");
}

/// Inside a `delegate` sub-agent the calling session is the sub-agent's:
/// its tools' injections join the sub-agent's conversation (its in-flight
/// list and transcript), never the parent's behind the delegate's result.
#[test]
fn a_sub_agents_injection_joins_the_sub_agents_conversation_not_the_parents() {
    let home = plugin_home();
    let rt = runtime();
    // The parent and the sub-agent replay this script in their own
    // sessions: `route` injects only in the sub-agent (its user message is
    // the task), and the sub-agent is not offered `delegate`.
    let script = r#"
turns:
  - tool_calls:
      - name: delegate
        args: {task: "sub task", tools: [route]}
      - name: route
        args: {who: "{user_message}"}
  - say: "finished"
"#;
    let (agent, _bundled) = agent_over(home.path(), script, &rt);
    let report = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            agent.send(Inbound::new("parent", "delegate"), None),
        )
        .await
        .expect("the turn finished")
    });
    assert_eq!(report.reply.as_deref(), Some("finished"), "{report:#?}");
    assert_eq!(user_texts(&report), ["delegate"], "{report:#?}");
    let found: Vec<_> = walk(&home.path().join("sessions"))
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains("note from the sub-agent")
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].to_string_lossy().contains("sub-"), "{found:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
