//! Whole agent turns: the scripted provider (and, in openai_stub.rs, a stub
//! OpenAI server), real plugins, real built-in tools, transcripts on disk.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{no_bundled, wait_until, write_plugin, BARRIER_PLUGIN};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::tools::{self, DelegateSlot, ToolLimits, Workspace};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::{Host, ToolOutcome};
use serde_json::{json, Value};

/// Records every event it sees (name and a detail) and offers tools that
/// sleep, block, or read the record back.
const RECORDER: &str = r#"
import asyncio, os, time
from flowly.agent.hooks import RewriteAction, SkipAction
EVENTS = []
CANCELLED = []
# Where each call starts and ends, in the order it happened: overlap is read
# from here, never from how long a turn took. A file, so a test can read it
# while the turn still runs.
SPANS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spans.log")

def span(event):
    with open(SPANS, "a") as f:
        f.write(event + "\n")

def register(ctx):
    def rec(name, detail=lambda c: ""):
        def hook(c):
            EVENTS.append(f"{name}:{detail(c)}" if detail(c) != "" else name)
        return hook
    ctx.register_hook("pre_gateway_dispatch", lambda c: SkipAction("spam") if c.event.content == "spam" else (RewriteAction(c.event.content.replace("secret", "[redacted]")) if "secret" in c.event.content else EVENTS.append(f"pre_gateway_dispatch:{c.gateway}")))
    ctx.register_hook("on_session_start", rec("on_session_start", lambda c: c.session_id))
    ctx.register_hook("pre_llm_call", lambda c: (EVENTS.append("pre_llm_call"), "remember the budget")[1])
    ctx.register_hook("pre_api_request", rec("pre_api_request"))
    ctx.register_hook("post_api_request", rec("post_api_request"))
    ctx.register_hook("post_llm_call", rec("post_llm_call", lambda c: f"{c.assistant_message[:12]}"))
    ctx.register_hook("pre_tool_call", rec("pre_tool_call", lambda c: c.tool_name))
    ctx.register_hook("post_tool_call", rec("post_tool_call", lambda c: c.tool_name))
    ctx.register_hook("transform_terminal_output", lambda c: (EVENTS.append("transform_terminal_output"), c.result.replace("SECRET", "******"))[1])
    ctx.register_hook("on_session_end", rec("on_session_end", lambda c: f"{c.completed}/{c.interrupted}"))
    ctx.register_hook("on_session_reset", rec("on_session_reset", lambda c: c.session_id))
    ctx.register_hook("on_session_finalize", rec("on_session_finalize", lambda c: c.session_id))
    ctx.register_hook("subagent_stop", rec("subagent_stop", lambda c: f"{c.subagent_id}:{c.reason}"))
    async def slow_hook(c):
        if c.tool_name == "hook_slow_probe":
            span("slow_hook:start")
            await asyncio.sleep(5)
    ctx.register_hook("pre_tool_call", slow_hook)
    async def nap(seconds: float = 0.3):
        span("nap:start")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            CANCELLED.append(seconds)
            span("nap:cancelled")
            raise
        span("nap:end")
        return f"napped {seconds}"
    def doze(seconds=1.0):
        span("doze:start")
        time.sleep(seconds)
        span("doze:end")
        return "dozed"
    ctx.register_tool("nap", {"type": "object", "properties": {"seconds": {"type": "number"}}}, nap)
    ctx.register_tool("doze", {"type": "object", "properties": {"seconds": {"type": "number"}}}, doze)
    ctx.register_tool("hook_slow_probe", {}, lambda: "probe ran")
    ctx.register_tool("recorded", {}, lambda: "\n".join(EVENTS))
    ctx.register_tool("clear_record", {}, lambda: EVENTS.clear())
    ctx.register_tool("cancelled", {}, lambda: repr(CANCELLED))
"#;

/// Fields drop in order: the agent (and the records of its hooks) before
/// the temporary directories it writes into.
struct Fixture {
    agent: Agent,
    rt: tokio::runtime::Runtime,
    _bundled: Option<tempfile::TempDir>,
    home: tempfile::TempDir,
}

fn fixture(script: &str, config: AgentConfig, real_bundled: bool) -> Fixture {
    let home = tempfile::tempdir().unwrap();
    write_plugin(
        &home.path().join("plugins"),
        "recorder",
        "name: recorder\n",
        &[("__init__.py", RECORDER)],
    );
    write_plugin(
        &home.path().join("plugins"),
        "barrier",
        "name: barrier\n",
        &[("__init__.py", BARRIER_PLUGIN)],
    );
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["recorder", "barrier"]}}"#,
    )
    .unwrap();
    let (bundled_dir, keep): (PathBuf, Option<tempfile::TempDir>) = if real_bundled {
        (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins_bundled"),
            None,
        )
    } else {
        let b = no_bundled();
        (b.path().to_path_buf(), Some(b))
    };
    let workspace = Workspace::new(&home.path().join("workspace")).unwrap();
    let slot = DelegateSlot::default();
    let mut builder = Host::builder()
        .home(home.path())
        .bundled_dir(bundled_dir)
        .hook_timeout(Duration::from_millis(500));
    for t in tools::builtin_tools(&workspace, &ToolLimits::default()) {
        builder = builder.tool(t);
    }
    let host = builder.tool(tools::delegate_tool(&slot)).build().unwrap();
    let provider = Arc::new(Scripted::new(Script::parse(script, "test.yaml").unwrap()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let agent = {
        let _g = rt.enter();
        Agent::new(Arc::new(host), provider, config, Some(&slot))
    };
    Fixture {
        home,
        _bundled: keep,
        agent,
        rt,
    }
}

impl Fixture {
    fn send(&self, session: &str, text: &str) -> plughost::agent::TurnReport {
        self.rt
            .block_on(self.agent.send(Inbound::new(session, text), None))
    }
    fn recorded(&self) -> Vec<String> {
        let text = self
            .rt
            .block_on(self.agent.host().call_tool("recorded", json!({}), ""))
            .text;
        let events: Vec<String> = text
            .lines()
            .filter(|l| !l.ends_with(":recorded"))
            .map(str::to_string)
            .collect();
        self.rt
            .block_on(self.agent.host().call_tool("clear_record", json!({}), ""));
        events
    }
    /// The recorder's span log so far: `tool:start`, `tool:end`, … in order.
    fn spans(&self) -> Vec<String> {
        let path = self.home.path().join("plugins/recorder/spans.log");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
    fn cancelled(&self) -> String {
        self.rt
            .block_on(self.agent.host().call_tool("cancelled", json!({}), ""))
            .text
    }
    fn transcript(&self, session: &str) -> Vec<Value> {
        let path = self.agent.sessions().path_of(session);
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

const TOOL_THEN_ANSWER: &str = r#"
turns:
  - say: "Writing."
    tool_calls:
      - name: write_file
        args: {path: "notes/a.txt", content: "alpha"}
      - name: exec
        # Not `cat notes/a.txt`: the two calls of one reply run concurrently.
        args: {command: "printf alpha; echo ' SECRET'"}
  - say: "You said: {user_message} | results: {tool_results}"
"#;

#[test]
fn a_turn_fires_events_in_order_and_injects_context_without_storing_it() {
    let f = fixture(TOOL_THEN_ANSWER, AgentConfig::default(), false);
    let report = f.send("s1", "hello");
    assert!(report.completed, "{:?}", report.error);
    let reply = report.reply.clone().unwrap();
    assert!(reply.starts_with("You said: <plugin_context>\nremember the budget\n</plugin_context>\n\nhello | results: "), "{reply}");
    assert!(reply.contains("Wrote 5 bytes to"), "{reply}");
    assert!(
        reply.contains("alpha ******"),
        "transform_terminal_output rewrote exec output: {reply}"
    );
    assert_eq!(report.iterations, 2);
    assert_eq!(report.tool_calls.len(), 2);
    assert_eq!(report.tool_calls[0].outcome, ToolOutcome::Ok);
    let events = f.recorded();
    let expected_start = [
        "pre_gateway_dispatch:cli",
        "on_session_start:s1",
        "pre_llm_call",
        "pre_api_request",
        "post_api_request",
        "post_llm_call:Writing.",
    ];
    assert_eq!(events[..6], expected_start.map(String::from), "{events:?}");
    // The two tool calls of one reply run concurrently: only each call's own order is fixed.
    let tool_events = &events[6..11];
    let at = |e: &str| {
        tool_events
            .iter()
            .position(|x| x == e)
            .unwrap_or_else(|| panic!("{e} missing: {events:?}"))
    };
    assert!(at("pre_tool_call:write_file") < at("post_tool_call:write_file"));
    assert!(at("pre_tool_call:exec") < at("transform_terminal_output"));
    assert!(at("transform_terminal_output") < at("post_tool_call:exec"));
    let expected_end = [
        "pre_llm_call",
        "pre_api_request",
        "post_api_request",
        "post_llm_call:You said: <p",
        "on_session_end:True/False",
    ];
    assert_eq!(events[11..], expected_end.map(String::from), "{events:?}");
    let transcript = f.transcript("s1");
    assert_eq!(
        transcript[0]["content"], "hello",
        "the stored user message is the original"
    );
    assert_eq!(transcript.iter().filter(|m| m["role"] == "tool").count(), 2);
    assert!(
        transcript
            .iter()
            .filter(|m| m["role"] == "user")
            .all(|m| !m["content"].as_str().unwrap().contains("plugin_context")),
        "hook patches never enter the stored transcript"
    );

    // A second message in the session: no second on_session_start.
    f.send("s1", "again");
    let events = f.recorded();
    assert!(
        !events.iter().any(|e| e.starts_with("on_session_start")),
        "{events:?}"
    );
}

#[test]
fn gateway_hooks_skip_and_rewrite_and_commands_do_not_reach_the_model() {
    let f = fixture(
        "turns:\n  - say: \"echo {user_message}\"\n",
        AgentConfig::default(),
        false,
    );
    let skipped = f.send("g", "spam");
    assert_eq!(skipped.skipped.as_deref(), Some("spam"));
    assert!(skipped.reply.is_none());
    assert!(
        !f.agent.sessions().path_of("g").exists(),
        "a skipped message never touches the session"
    );
    let rewritten = f.send("g", "my secret plan");
    assert_eq!(
        rewritten.reply.as_deref(),
        Some("echo <plugin_context>\nremember the budget\n</plugin_context>\n\nmy [redacted] plan")
    );
    f.recorded();
    let unknown = f.send("g", "/frobnicate now");
    assert!(unknown.command);
    assert_eq!(
        unknown.reply.as_deref(),
        Some("Unknown command /frobnicate. Type /help to see the commands.")
    );
    let help = f.send("g", "/help").reply.unwrap();
    assert!(
        help.contains("/new") && help.contains("/compact") && help.contains("/plugins"),
        "{help}"
    );
    assert!(
        f.recorded().iter().all(|e| !e.starts_with("pre_llm_call")),
        "commands never reach the model"
    );
    let new = f.send("g", "/new");
    assert_eq!(new.reply.as_deref(), Some("Started a new session."));
    assert!(f.recorded().contains(&"on_session_reset:g".to_string()));
    f.send("g", "fresh start");
    assert!(
        f.recorded().contains(&"on_session_start:g".to_string()),
        "a reset session starts again"
    );
}

#[test]
fn tool_and_hook_timeouts() {
    let script = r#"
turns:
  - tool_calls:
      - name: nap
        args: {seconds: 5}
      - name: doze
        args: {seconds: 2}
      - name: hook_slow_probe
  - say: "{tool_results}"
"#;
    let config = AgentConfig {
        tool_timeout: Duration::from_millis(700),
        ..AgentConfig::default()
    };
    let f = fixture(script, config, false);
    let report = f.send("t", "go");
    // The calls overlap: all three were inside before the first one ended
    // (nap cancelled at its 0.7 s, doze's 2 s sleep abandoned, the probe
    // held up by its 5 s hook until the hook's budget ran out).
    let spans = f.spans();
    let first_end = spans
        .iter()
        .position(|e| !e.ends_with(":start"))
        .unwrap_or(spans.len());
    for start in ["nap:start", "doze:start", "slow_hook:start"] {
        let at = spans.iter().position(|e| e == start);
        assert!(
            at.is_some_and(|at| at < first_end),
            "{start} before any call ended: {spans:?}"
        );
    }
    let results: Vec<&str> = report
        .tool_calls
        .iter()
        .map(|c| c.result.as_str())
        .collect();
    assert_eq!(results[0], "Error executing nap: timed out after 0.7 s");
    assert_eq!(
        results[1], "Error executing doze: timed out after 0.7 s",
        "a sync handler is abandoned"
    );
    assert_eq!(
        results[2], "probe ran",
        "the slow async hook was skipped after its budget"
    );
    // The cancellation reaches the coroutine after the turn has moved on.
    wait_until("nap's cancellation", Duration::from_secs(30), || {
        f.cancelled() != "[]"
    });
    assert_eq!(
        f.cancelled(),
        "[5]",
        "the timed-out coroutine was cancelled"
    );
    let slow_hook = f
        .agent
        .host()
        .registry()
        .hooks()
        .entries(plughost::HookEvent::ToolGuard)
        .iter()
        .find(|e| e.label.contains("slow_hook"))
        .unwrap()
        .stats
        .errors();
    assert_eq!(slow_hook, 1);
}

#[test]
fn a_cancelled_turn_ends_cleanly() {
    let f = fixture(
        "turns:\n  - tool_calls:\n      - name: nap\n        args: {seconds: 10}\n  - say: done\n",
        AgentConfig::default(),
        false,
    );
    // Interrupt once the 10 s nap is running (not after a guessed delay,
    // which on a slow machine could fire before the tool started).
    let nap_started = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f.spans().iter().any(|e| e == "nap:start") && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let report = f.rt.block_on(async {
        f.agent
            .send_cancellable(Inbound::new("c", "go"), None, nap_started)
            .await
    });
    assert!(report.interrupted);
    wait_until(
        "on_session_end and the nap's cancellation",
        Duration::from_secs(30),
        || {
            f.cancelled() != "[]"
                && f.recorded()
                    .contains(&"on_session_end:False/True".to_string())
        },
    );
    // The turn ended by cancelling the nap, not by waiting it out.
    assert_eq!(f.cancelled(), "[10]");
    assert!(
        !f.spans().contains(&"nap:end".to_string()),
        "{:?}",
        f.spans()
    );
}

#[test]
fn sessions_run_concurrently_and_resume_from_disk() {
    // Each turn's tool waits at a barrier that opens only when all 8 turns
    // are inside it at once: sequential turns would never meet.
    let f = fixture("turns:\n  - tool_calls:\n      - name: meet\n        args: {key: par, n: 8}\n  - say: \"{tool_results}\"\n", AgentConfig::default(), false);
    let reports = f.rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..8 {
            let agent = f.agent.clone();
            set.spawn(async move {
                agent
                    .send(Inbound::new(&format!("par-{i}"), "go"), None)
                    .await
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.unwrap());
        }
        out
    });
    assert!(
        reports.iter().all(|r| r.reply.as_deref() == Some("met 8")),
        "{:?}",
        reports[0].reply
    );

    // A new agent over the same home resumes the transcript.
    let home = f.home.path().to_path_buf();
    let bundled = no_bundled();
    let host = Host::builder()
        .home(&home)
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let provider = Arc::new(Scripted::new(
        Script::parse("turns:\n  - say: \"seen {user_message}\"\n", "t.yaml").unwrap(),
    ));
    let agent = Agent::new(Arc::new(host), provider, AgentConfig::default(), None);
    let report =
        f.rt.block_on(agent.send(Inbound::new("par-3", "after restart"), None));
    assert!(report.completed);
    let transcript = f.transcript("par-3");
    assert_eq!(transcript.len(), 6, "{transcript:?}");
    assert_eq!(transcript[0]["content"], "go");
    assert_eq!(transcript[4]["content"], "after restart");
    f.rt.block_on(agent.shutdown());
    f.rt.block_on(agent.shutdown());
}

#[test]
fn iteration_cap_finalize_and_compact() {
    let script = "turns:\n".to_string() + &"  - tool_calls:\n      - name: list_dir\n".repeat(10);
    let config = AgentConfig {
        max_iterations: 3,
        compact_keep: 2,
        ..AgentConfig::default()
    };
    let f = fixture(&script, config, false);
    let report = f.send("cap", "loop forever");
    assert_eq!(report.iterations, 3);
    assert_eq!(
        report.reply.as_deref(),
        Some("Stopped after 3 model iterations without a final answer (the iteration cap; raise it with --max-iterations).")
    );
    f.send("cap", "more");
    let compact = f.send("cap", "/compact").reply.unwrap();
    assert!(compact.starts_with("Compacted the session"), "{compact}");
    assert_eq!(f.transcript("cap")[0]["role"], "user");
    f.recorded();
    f.send("idle", "hello");
    // Idle for longer than the limit below; "cap" is used again right
    // before it. The margin is a whole second, so only a stall of a
    // second between the last send and the eviction could evict "cap".
    let idle_since = Instant::now();
    let limit = Duration::from_secs(1);
    std::thread::sleep((limit + Duration::from_millis(200)).saturating_sub(idle_since.elapsed()));
    f.send("cap", "still here");
    let evicted = f.rt.block_on(f.agent.evict_idle(limit));
    assert_eq!(evicted, 1, "only the idle session");
    f.rt.block_on(f.agent.shutdown());
    f.rt.block_on(f.agent.shutdown());
    let mut finals: Vec<String> = f
        .recorded()
        .into_iter()
        .filter(|e| e.starts_with("on_session_finalize"))
        .collect();
    finals.sort();
    assert_eq!(
        finals,
        ["on_session_finalize:cap", "on_session_finalize:idle"],
        "once per session"
    );
}

#[test]
fn delegate_runs_a_restricted_subagent_and_fires_subagent_stop() {
    let script = r#"
turns:
  - tool_calls:
      - name: delegate
        args: {task: "list the workspace", tools: ["list_dir"]}
  - say: "sub-agent says: {tool_results}"
"#;
    // The sub-agent replays the same script from the top in its own session:
    // its first turn asks for `delegate`, which it may not use.
    let f = fixture(script, AgentConfig::default(), false);
    let report = f.send("parent", "delegate it");
    let reply = report.reply.unwrap();
    assert!(
        reply.contains("sub-agent says: sub-agent says: Error: Tool 'delegate' not found"),
        "{reply}"
    );
    let events = f.recorded();
    assert!(
        events
            .iter()
            .any(|e| e == "subagent_stop:parent/sub-1:completed"),
        "{events:?}"
    );
}

#[test]
fn builtin_file_tools_stay_in_the_workspace_and_guard_blocks() {
    let script = r#"
turns:
  - tool_calls:
      - name: write_file
        args: {path: "../escape.txt", content: "x"}
      - name: read_file
        args: {path: "/etc/hostname"}
      - name: write_file
        args: {path: "ok.txt", content: "one two two"}
      - name: exec
        args: {command: "rm -rf ~"}
  - tool_calls:
      - name: edit_file
        args: {path: "ok.txt", old_string: "two", new_string: "2"}
  - tool_calls:
      - name: edit_file
        args: {path: "ok.txt", old_string: "two", new_string: "2", replace_all: true}
  - tool_calls:
      - name: read_file
        args: {path: "ok.txt"}
      - name: list_dir
  - say: done
"#;
    let f = fixture(script, AgentConfig::default(), true);
    let report = f.send("ws", "go");
    let r: Vec<&str> = report
        .tool_calls
        .iter()
        .map(|c| c.result.as_str())
        .collect();
    assert!(
        r[0].starts_with("Error executing write_file: ../escape.txt is outside the workspace"),
        "{}",
        r[0]
    );
    assert!(r[1].contains("outside the workspace"), "{}", r[1]);
    assert!(
        r[3].starts_with("[blocked: command-guard refused"),
        "{}",
        r[3]
    );
    assert!(r[4].contains("occurs 2 times"), "{}", r[4]);
    assert!(r[5].starts_with("Replaced 2 occurrence(s)"), "{}", r[5]);
    assert_eq!(r[6], "one 2 2");
    assert!(r[7].contains("ok.txt"), "{}", r[7]);
    assert!(!f.home.path().join("escape.txt").exists());
}
