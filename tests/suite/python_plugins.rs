//! Real plugin directories loaded through the embedded interpreter.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{home_with, no_bundled, wait_until, write_plugin, BARRIER_PLUGIN};
use plughost::core::hooks::{
    GatewayContext, HookAction, HookEvent, HookPayload, InboundMessage, LlmCallContext,
    SessionContext, SubagentStopContext, ToolCallContext,
};
use plughost::{Host, ToolOutcome};
use serde_json::json;

const TOOLS_PLUGIN: &str = r#"
import asyncio, os
from . import helpers
from .helpers import shout

def register(ctx):
    ctx.register_tool("echo", {"parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
                      lambda text: text, description="Echo text")
    ctx.register_tool(name="shout", schema={"type": "object", "properties": {"text": {"type": "string"}}}, handler=shout)
    async def slow(ms: int = 10):
        await asyncio.sleep(ms / 1000)
        return f"slept {ms}"
    ctx.register_tool("slow", {"type": "function", "function": {"description": "Sleep a bit", "parameters": {"type": "object", "properties": {"ms": {"type": "integer"}}}}}, slow)
    async def quick():
        return "quick"
    ctx.register_tool("quick", {}, quick)
    ctx.register_tool("boom", {}, lambda: 1 / 0)
    ctx.register_tool("nothing", {}, lambda: None)
    ctx.register_tool("number", {}, lambda: 42)
    ctx.register_tool("picky", {"type": "object", "properties": {"a": {"type": "integer"}, "extra": {"type": "string"}}}, lambda a: f"a={a}")
    ctx.register_tool("greedy", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}, lambda **kw: ",".join(sorted(kw)))
    gate = {"open": False}
    ctx.register_tool("gated", {}, lambda: "open", check_fn=lambda: gate["open"])
    ctx.register_tool("open_gate", {}, lambda: gate.update(open=True))
    def bad_check():
        raise RuntimeError("token store offline")
    ctx.register_tool("broken_gate", {}, lambda: "never", check_fn=bad_check)
    ctx.register_tool("described", {"description": "from schema", "properties": {}}, lambda: "d")
    ctx.register_tool("helper_name", {}, lambda: helpers.NAME)
    import time
    async def hog(seconds: float = 0.3, marker: str = ""):
        await asyncio.sleep(0)      # from here on it runs on the loop thread
        if marker:
            open(marker, "w").close()   # tells the test the loop is busy now
        time.sleep(seconds)         # ...which stays busy running this callback
        return "hogged"
    ctx.register_tool("hog", {"type": "object", "properties": {"seconds": {"type": "number"}, "marker": {"type": "string"}}}, hog)
    async def needs_task():
        task = asyncio.current_task()
        await asyncio.sleep(0)
        return "in a task" if task is not None and asyncio.current_task() is task else "no task"
    ctx.register_tool("needs_task", {}, needs_task)
"#;

const HELPERS: &str = r#"
NAME = "tools-helpers"
def shout(text=""):
    return text.upper()
"#;

const HOOKS_PLUGIN: &str = r#"
import logging
from flowly.agent.hooks import BlockAction, ToolHookContext, LLMHookContext, SessionHookContext, SubagentStopContext, GatewayDispatchContext, SkipAction, RewriteAction
from .util import NAME

log = logging.getLogger("hooks-plugin")
SEEN = []

def register(ctx):
    def pre(c):
        assert isinstance(c, ToolHookContext)
        SEEN.append(("pre", c.tool_name, dict(c.params), c.session_id))
        if c.tool_name == "echo" and c.params.get("text") == "forbidden":
            return BlockAction("echo of forbidden text is not allowed")
        if c.tool_name == "shout":
            c.params["text"] = c.params.get("text", "") + "!"
    def post(c):
        SEEN.append(("post", c.tool_name, c.result, c.success, c.duration_ms >= 0))
    async def transform(c):
        if c.tool_name == "number":
            return f"transformed {c.result}"
    def raising(c):
        raise ValueError("hook exploded")
    def llm(c):
        assert isinstance(c, LLMHookContext)
        return {"context": f"model={c.model} user={c.user_message}"}
    def llm2(c):
        return "second"
    def session(c):
        assert isinstance(c, SessionHookContext)
        SEEN.append(("session", c.session_id, c.completed))
    def subagent(c):
        assert isinstance(c, SubagentStopContext)
        SEEN.append(("subagent", c.subagent_id, c.reason))
    def gateway(c):
        assert isinstance(c, GatewayDispatchContext)
        if c.event.content == "spam":
            return SkipAction("spam")
        if "secret" in c.event.content:
            return RewriteAction(c.event.content.replace("secret", "[redacted]"))
    def seen(limit: int = 100):
        return repr(SEEN[-limit:])
    ctx.register_hook("pre_tool_call", pre)
    ctx.register_hook("pre_tool_call", raising)
    ctx.register_hook("post_tool_call", post)
    ctx.register_hook("transform_tool_result", transform)
    ctx.register_hook("pre_llm_call", llm)
    ctx.register_hook("pre_llm_call", llm2)
    ctx.register_hook("on_session_start", session)
    ctx.register_hook("on_session_end", session)
    ctx.register_hook("subagent_stop", subagent)
    ctx.register_hook("pre_gateway_dispatch", gateway)
    ctx.register_hook("no_such_event", session)
    ctx.register_tool("seen", {"type": "object", "properties": {"limit": {"type": "integer"}}}, seen)
    ctx.register_tool("util_name", {}, lambda: NAME)
    log.warning("hooks plugin registered")
"#;

const COMMANDS_PLUGIN: &str = r#"
import asyncio
from pathlib import Path
def register(ctx):
    def ping(args):
        return "pong" + (f" {args}" if args else "")
    async def later(args):
        await asyncio.sleep(0.01)
        return f"later {args}"
    ctx.register_command("Ping Pong", ping, description="Round trip", args_hint="[message]")
    ctx.register_command("/later", later, description="Async reply")
    ctx.register_command("quiet", lambda args: None)
    ctx.register_command("fails", lambda args: 1 / 0)
    ctx.register_command("help", lambda args: "hijacked")
    ctx.register_skill("guide", Path(__file__).parent / "skills" / "guide" / "SKILL.md", description="A guide")
    ctx.register_skill("relative", "skills/guide")
"#;

fn build_standard() -> (tempfile::TempDir, tempfile::TempDir, Host) {
    let home = home_with(&["tools", "hooks", "commands"]);
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "tools",
        "name: tools\nversion: 1.0\n",
        &[
            ("__init__.py", TOOLS_PLUGIN),
            ("helpers.py", HELPERS),
            ("util.py", "NAME = 'tools-util'\n"),
        ],
    );
    write_plugin(
        &plugins,
        "hooks",
        "name: hooks\n",
        &[
            ("__init__.py", HOOKS_PLUGIN),
            ("util.py", "NAME = 'hooks-util'\n"),
        ],
    );
    write_plugin(
        &plugins,
        "commands",
        "name: commands\n",
        &[
            ("__init__.py", COMMANDS_PLUGIN),
            ("skills/guide/SKILL.md", "# Guide\nStep one.\n"),
        ],
    );
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    (home, bundled, host)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn plugins_load_and_list_their_contributions() {
    let (_home, _b, host) = build_standard();
    let pinned_plugins = host.plugins();
    let tools = pinned_plugins.iter().find(|p| p.key == "tools").unwrap();
    assert!(
        tools.loaded && tools.enabled && tools.error.is_none(),
        "{tools:?}"
    );
    assert_eq!(tools.version, "1.0");
    assert!(tools.tools.contains(&"echo".to_string()));
    let pinned_plugins = host.plugins();
    let hooks = pinned_plugins.iter().find(|p| p.key == "hooks").unwrap();
    assert!(hooks.hooks.contains(&"pre_tool_call".to_string()));
    assert!(
        hooks.hooks.contains(&"no_such_event".to_string()),
        "unknown events are accepted"
    );
    let pinned_plugins = host.plugins();
    let commands = pinned_plugins.iter().find(|p| p.key == "commands").unwrap();
    assert_eq!(
        commands.commands,
        ["ping-pong", "later", "quiet", "fails"],
        "help is reserved and refused"
    );
    assert_eq!(commands.skills, ["commands:guide", "commands:relative"]);
    let pinned_registry = host.registry();
    let echo = pinned_registry.tool("echo").unwrap();
    assert_eq!(echo.spec.description, "Echo text");
    assert_eq!(echo.spec.parameters["required"], json!(["text"]));
    assert_eq!(
        host.registry().tool("slow").unwrap().spec.description,
        "Sleep a bit"
    );
    assert_eq!(
        host.registry().tool("described").unwrap().spec.description,
        "from schema"
    );
    assert_eq!(
        host.registry().tool("quick").unwrap().spec.parameters,
        json!({"type": "object", "properties": {}})
    );
}

#[test]
fn dispatch_pipeline_results() {
    let (_home, _b, host) = build_standard();
    let rt = rt();
    let call = |name: &str, args: serde_json::Value| rt.block_on(host.call_tool(name, args, "s1"));
    assert_eq!(call("echo", json!({"text": "hi"})).text, "hi");
    assert_eq!(
        call("missing", json!({})).text,
        "Error: Tool 'missing' not found"
    );
    let invalid = call("echo", json!({}));
    assert_eq!(invalid.outcome.kind(), "invalid_arguments");
    assert!(
        invalid
            .text
            .starts_with("Error: invalid arguments for echo: "),
        "{}",
        invalid.text
    );
    assert!(invalid.text.contains("text"), "{}", invalid.text);
    let wrong_type = call("echo", json!({"text": 5}));
    assert!(
        wrong_type.text.contains("(at /text)"),
        "{}",
        wrong_type.text
    );
    let blocked = call("echo", json!({"text": "forbidden"}));
    assert_eq!(
        blocked.text,
        "[blocked: echo of forbidden text is not allowed]"
    );
    assert_eq!(
        blocked.outcome,
        ToolOutcome::Blocked {
            message: "echo of forbidden text is not allowed".into()
        }
    );
    assert_eq!(
        call("boom", json!({})).text,
        "Error executing boom: division by zero"
    );
    assert_eq!(call("nothing", json!({})).text, "");
    assert_eq!(
        call("number", json!({})).text,
        "transformed 42",
        "transform_tool_result replaces"
    );
    assert_eq!(
        call("picky", json!({"a": 1, "extra": "dropped"})).text,
        "a=1",
        "unexpected kwargs dropped"
    );
    assert_eq!(
        call("greedy", json!({"a": 1, "b": 2})).text,
        "a,b",
        "**kwargs gets everything"
    );
    assert_eq!(
        call("shout", json!({"text": "hey"})).text,
        "HEY!",
        "a pre hook's in-place edit reaches the handler"
    );
    assert_eq!(call("quick", json!({})).text, "quick");
    assert_eq!(call("slow", json!({"ms": 5})).text, "slept 5");
    assert_eq!(call("helper_name", json!({})).text, "tools-helpers");
    assert_eq!(
        call("util_name", json!({})).text,
        "hooks-util",
        "two plugins' util.py do not collide"
    );

    assert_eq!(
        call("gated", json!({})).text,
        "Error: gated is unavailable (plugin check_fn returned False)"
    );
    call("open_gate", json!({}));
    assert_eq!(
        call("gated", json!({})).text,
        "open",
        "check_fn runs at dispatch time"
    );
    assert_eq!(
        call("broken_gate", json!({})).text,
        "Error: broken_gate availability check failed: token store offline"
    );
    let args_not_object = call("echo", json!([1]));
    assert!(args_not_object
        .text
        .starts_with("Error: arguments for echo must be a JSON object"));
}

#[test]
fn hooks_see_contexts_and_failures_are_isolated() {
    let (_home, _b, host) = build_standard();
    let rt = rt();
    rt.block_on(host.call_tool("echo", json!({"text": "ctx"}), "sess-9"));
    let seen = rt
        .block_on(host.call_tool("seen", json!({"limit": 6}), ""))
        .text;
    assert!(
        seen.contains("('pre', 'echo', {'text': 'ctx'}, 'sess-9')"),
        "{seen}"
    );
    assert!(
        seen.contains("('post', 'echo', 'ctx', True, True)"),
        "{seen}"
    );
    rt.block_on(host.call_tool("boom", json!({}), ""));
    let seen = rt
        .block_on(host.call_tool("seen", json!({"limit": 4}), ""))
        .text;
    assert!(
        seen.contains("('post', 'boom', 'Error executing boom: division by zero', False, True)"),
        "{seen}"
    );
    // The raising pre_tool_call hook was counted, never propagated.
    let pinned_registry = host.registry();
    let raising = pinned_registry
        .hooks()
        .entries(HookEvent::ToolGuard)
        .iter()
        .find(|e| e.label.ends_with("raising"))
        .unwrap();
    assert!(raising.stats.errors() >= 2);
    assert_eq!(raising.stats.errors(), raising.stats.calls());
}

#[test]
fn every_event_family_fires_with_its_context_and_actions() {
    let (_home, _b, host) = build_standard();
    let rt = rt();
    let mut llm = LlmCallContext {
        model: "m1".into(),
        user_message: "hello".into(),
        ..Default::default()
    };
    let injected = rt.block_on(plughost::core::dispatch::fire_prompt_context(
        &host.registry(),
        &mut llm,
    ));
    assert_eq!(injected, ["model=m1 user=hello", "second"]);
    assert_eq!(
        plughost::core::dispatch::inject_context("hello", &injected),
        "<plugin_context>\nmodel=m1 user=hello\n\nsecond\n</plugin_context>\n\nhello"
    );

    let mut session = SessionContext {
        session_id: "s-7".into(),
        completed: false,
        ..Default::default()
    };
    rt.block_on(host.fire(HookEvent::TurnClosed, HookPayload::Session(&mut session)));
    let mut sub = SubagentStopContext {
        subagent_id: "sub-1".into(),
        reason: "done".into(),
        ..Default::default()
    };
    rt.block_on(host.fire(HookEvent::SubagentDone, HookPayload::Subagent(&mut sub)));
    let seen = rt
        .block_on(host.call_tool("seen", json!({"limit": 3}), ""))
        .text;
    assert!(seen.contains("('session', 's-7', False)"), "{seen}");
    assert!(seen.contains("('subagent', 'sub-1', 'done')"), "{seen}");

    let gateway = |content: &str| {
        let mut ctx = GatewayContext {
            event: InboundMessage {
                content: content.into(),
                channel: "cli".into(),
                ..Default::default()
            },
            gateway: "cli".into(),
            ..Default::default()
        };
        rt.block_on(plughost::core::dispatch::fire_gateway(
            &host.registry(),
            &mut ctx,
        ))
    };
    use plughost::core::dispatch::GatewayDecision;
    assert_eq!(gateway("spam"), GatewayDecision::Skip("spam".into()));
    assert_eq!(
        gateway("my secret"),
        GatewayDecision::Rewrite("my [redacted]".into())
    );
    assert_eq!(gateway("fine"), GatewayDecision::Deliver);

    // Events nobody subscribed to fire as no-ops.
    let mut tool = ToolCallContext::default();
    assert!(rt
        .block_on(host.fire(HookEvent::ExecOutputRewrite, HookPayload::Tool(&mut tool)))
        .is_empty());
}

#[test]
fn commands_and_skills() {
    let (_home, _b, host) = build_standard();
    let rt = rt();
    let run = |line: &str| rt.block_on(host.run_command(line));
    assert_eq!(
        run("/ping-pong hi there").unwrap().as_deref(),
        Some("pong hi there")
    );
    assert_eq!(run("/PING-PONG").unwrap().as_deref(), Some("pong"));
    assert_eq!(run("/later x").unwrap().as_deref(), Some("later x"));
    assert_eq!(run("/quiet").unwrap(), None);
    let help = run("/help").unwrap().unwrap();
    assert!(help.contains("/ping-pong [message] — Round trip"), "{help}");
    assert!(help.contains("/later — Async reply"), "{help}");
    assert!(!help.contains("hijacked"));
    let unknown = run("/nope").unwrap_err().to_string();
    assert!(unknown.contains("/help"), "{unknown}");
    let failed = run("/fails").unwrap_err().to_string();
    assert!(
        failed.contains("ZeroDivisionError: division by zero"),
        "{failed}"
    );
    assert_eq!(
        host.skill("commands:guide").unwrap(),
        "# Guide\nStep one.\n"
    );
    assert_eq!(
        host.skill("commands:relative").unwrap(),
        "# Guide\nStep one.\n"
    );
    assert!(host.skill("commands:missing").is_err());
}

#[test]
fn broken_plugins_disable_only_themselves_and_roll_back() {
    let home = home_with(&[
        "import-error",
        "no-register",
        "raises",
        "good",
        "bad-skill",
        "colon-skill",
        "async-register",
        "late",
    ]);
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "import-error",
        "name: import-error\n",
        &[("__init__.py", "import not_a_module_anywhere\n")],
    );
    write_plugin(
        &plugins,
        "no-register",
        "name: no-register\n",
        &[("__init__.py", "X = 1\n")],
    );
    write_plugin(
        &plugins,
        "raises",
        "name: raises\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_tool('half', {}, lambda: 'x')\n    ctx.register_hook('pre_tool_call', lambda c: None)\n    ctx.register_command('half', lambda a: 'x')\n    raise RuntimeError('config missing')\n",
        )],
    );
    write_plugin(
        &plugins,
        "good",
        "name: good\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_tool('fine', {}, lambda: 'fine')\n",
        )],
    );
    write_plugin(
        &plugins,
        "bad-skill",
        "name: bad-skill\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_skill('x', 'nope/SKILL.md')\n",
        )],
    );
    write_plugin(
        &plugins,
        "colon-skill",
        "name: colon-skill\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_skill('a:b', __file__)\n",
        )],
    );
    write_plugin(
        &plugins,
        "async-register",
        "name: async-register\n",
        &[("__init__.py", "async def register(ctx):\n    pass\n")],
    );
    write_plugin(
        &plugins,
        "late",
        "name: late\n",
        &[("__init__.py", "SAVED = []\ndef register(ctx):\n    SAVED.append(ctx)\n    ctx.register_tool('late_probe', {}, lambda: repr(_try()))\ndef _try():\n    try:\n        SAVED[0].register_tool('later', {}, lambda: 1)\n    except RuntimeError as e:\n        return 'refused'\n")],
    );
    write_plugin(
        &plugins,
        "manifest-broken",
        "name: [\n",
        &[("__init__.py", "")],
    );
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .enable(["manifest-broken"])
        .build()
        .unwrap();
    let error = |k: &str| {
        host.plugins()
            .iter()
            .find(|p| p.key == k)
            .unwrap()
            .error
            .clone()
            .unwrap_or_default()
    };
    assert!(
        error("import-error")
            .starts_with("ModuleNotFoundError: No module named 'not_a_module_anywhere'"),
        "{}",
        error("import-error")
    );
    assert!(
        error("no-register").starts_with("AttributeError:"),
        "{}",
        error("no-register")
    );
    assert_eq!(error("raises"), "RuntimeError: config missing");
    assert!(
        error("bad-skill").starts_with("FileNotFoundError:"),
        "{}",
        error("bad-skill")
    );
    assert!(
        error("colon-skill").starts_with("ValueError:"),
        "{}",
        error("colon-skill")
    );
    assert!(
        error("async-register").starts_with("TypeError:"),
        "{}",
        error("async-register")
    );
    assert!(
        error("manifest-broken").starts_with("malformed plugin.yaml"),
        "{}",
        error("manifest-broken")
    );
    assert!(
        host.registry().tool("half").is_none(),
        "a failed plugin's tools are rolled back"
    );
    assert!(host.registry().command("half").is_none());
    assert!(host
        .registry()
        .hooks()
        .entries(HookEvent::ToolGuard)
        .is_empty());
    let rt = rt();
    assert_eq!(
        rt.block_on(host.call_tool("fine", json!({}), "")).text,
        "fine"
    );
    assert_eq!(
        rt.block_on(host.call_tool("late_probe", json!({}), ""))
            .text,
        "'refused'"
    );
    let pinned_plugins = host.plugins();
    let good = pinned_plugins.iter().find(|p| p.key == "good").unwrap();
    assert!(good.loaded && good.error.is_none());
}

#[test]
fn tool_collisions_last_writer_wins_and_natives_can_be_overridden() {
    let home = home_with(&["a-first", "b-second"]);
    let plugins = home.path().join("plugins");
    write_plugin(&plugins, "a-first", "name: a-first\n", &[("__init__.py", "def register(ctx):\n    ctx.register_tool('dup', {}, lambda: 'first')\n    ctx.register_command('dup', lambda a: 'first')\n")]);
    write_plugin(&plugins, "b-second", "name: b-second\n", &[("__init__.py", "def register(ctx):\n    ctx.register_tool('dup', {}, lambda: 'second')\n    ctx.register_tool('native_one', {}, lambda: 'python wins')\n    ctx.register_command('dup', lambda a: 'second')\n")]);
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .tool(plughost::Tool::from_fn(
            "native_one",
            "native",
            json!({"type": "object"}),
            |_| Ok("rust".into()),
        ))
        .tool(plughost::Tool::from_fn(
            "native_two",
            "native",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            |a| Ok(format!("n={}", a["n"])),
        ))
        .build()
        .unwrap();
    let rt = rt();
    assert_eq!(
        rt.block_on(host.call_tool("dup", json!({}), "")).text,
        "second"
    );
    assert_eq!(host.registry().tool("dup").unwrap().spec.plugin, "b-second");
    assert_eq!(
        rt.block_on(host.call_tool("native_one", json!({}), ""))
            .text,
        "python wins"
    );
    assert_eq!(
        rt.block_on(host.call_tool("native_two", json!({"n": 3}), ""))
            .text,
        "n=3"
    );
    assert_eq!(
        rt.block_on(host.run_command("/dup")).unwrap().as_deref(),
        Some("second")
    );
}

#[test]
fn native_hooks_run_beside_python_hooks() {
    let (home, _b, _) = build_standard();
    let counter = Arc::new(AtomicUsize::new(0));
    let seen = counter.clone();
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .hook(
            HookEvent::ToolGuard,
            move |_e: HookEvent, p: HookPayload<'_>| {
                seen.fetch_add(1, Ordering::SeqCst);
                match p {
                    HookPayload::Tool(c) if c.tool_name == "number" => {
                        HookAction::Block("native says no".into())
                    }
                    _ => HookAction::Continue,
                }
            },
        )
        .build()
        .unwrap();
    let rt = rt();
    assert_eq!(
        rt.block_on(host.call_tool("number", json!({}), "")).text,
        "[blocked: native says no]"
    );
    assert_eq!(
        rt.block_on(host.call_tool("echo", json!({"text": "x"}), ""))
            .text,
        "x"
    );
    assert_eq!(counter.load(Ordering::SeqCst), 2);
}

#[test]
fn many_async_calls_overlap() {
    // 200 calls of a barrier that opens only when all 200 are inside at
    // once: calls that did not overlap would never fill it.
    let home = home_with(&["barrier"]);
    write_plugin(
        &home.path().join("plugins"),
        "barrier",
        "name: barrier\n",
        &[("__init__.py", BARRIER_PLUGIN)],
    );
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let host = Arc::new(host);
    let rt = rt();
    let results = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..200 {
            let host = host.clone();
            set.spawn(async move {
                host.call_tool("meet", json!({"key": "many", "n": 200}), "")
                    .await
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.unwrap());
        }
        out
    });
    assert_eq!(results.len(), 200);
    assert!(
        results.iter().all(|r| r.text == "met 200"),
        "the calls did not overlap: {:?}",
        results
            .iter()
            .find(|r| r.text != "met 200")
            .map(|r| &r.text)
    );
}

#[test]
fn coroutines_start_even_while_the_loop_thread_is_busy() {
    let (home, _b, host) = build_standard();
    let host = Arc::new(host);
    let rt = rt();
    let marker = home.path().join("hog-is-blocking");
    let hog = {
        let host = host.clone();
        let args = json!({"seconds": 0.5, "marker": marker.to_string_lossy()});
        rt.spawn(async move { host.call_tool("hog", args, "").await })
    };
    wait_until(
        "hog to block the loop thread",
        Duration::from_secs(30),
        || marker.exists(),
    );
    // The loop thread is inside hog's blocking callback: these are queued for
    // it rather than stepped here, and still complete (the timeout only
    // guards against a hang).
    let quick = rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                host.call_tool("quick", json!({}), ""),
            )
            .await
        })
        .expect("a coroutine queued while the loop was busy never ran");
    assert_eq!(quick.text, "quick");
    let slow = rt.block_on(host.call_tool("slow", json!({"ms": 1}), ""));
    assert_eq!(slow.text, "slept 1");
    assert_eq!(rt.block_on(hog).unwrap().text, "hogged");
    // A coroutine's eager first step runs inside a real asyncio Task.
    assert_eq!(
        rt.block_on(host.call_tool("needs_task", json!({}), ""))
            .text,
        "in a task"
    );
}

#[test]
fn compat_modules_are_importable_with_their_names() {
    let home = home_with(&["compat"]);
    write_plugin(
        &home.path().join("plugins"),
        "compat",
        "name: compat\n",
        &[(
            "__init__.py",
            r#"
from flowly.agent.hooks import (BlockAction, SkipAction, RewriteAction, HookContext, ToolHookContext,
    LLMHookContext, SessionHookContext, SubagentStopContext, GatewayDispatchContext, VALID_EVENTS)
from flowly.plugins import PluginContext
from flowly.profile import get_flowly_home

def register(ctx):
    assert isinstance(ctx, PluginContext)
    assert len(VALID_EVENTS) == 14
    c = ToolHookContext(tool_name="t", params={"a": 1})
    c.result = "r"
    assert c.result == "r" and c.session_id == "" and c.success is None
    assert isinstance(c, HookContext)
    assert BlockAction(message="m").message == "m" and SkipAction().reason == ""
    home = str(get_flowly_home())
    ctx.register_tool("home", {}, lambda: home)
"#,
        )],
    );
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let p = &host.plugins()[0];
    assert!(p.loaded, "{:?}", p.error);
    let got = rt().block_on(host.call_tool("home", json!({}), "")).text;
    assert_eq!(got, home.path().to_string_lossy());
}

/// A hook's own assignment to the context's `result`, `duration_ms` or
/// `success` is replaced by the pipeline's values at the next stage (the
/// context, made at `pre_tool_call` and written at `post_tool_call`, is
/// only left unwritten when it still holds what was written last), and
/// the same object goes from stage to stage.
#[test]
fn a_hooks_assignments_to_the_context_are_replaced_at_the_next_stage() {
    const SEEN: &str = r#"
seen = []

def register(ctx):
    ctx.register_tool("two", {}, lambda: "pipeline-result")
    def post(c):
        seen.append(("post", id(c), c.result, c.success, c.duration_ms >= 0))
        c.result, c.success, c.duration_ms = "assigned", False, -1.0
    def transform(c):
        seen.append(("transform", id(c), c.result, c.success, c.duration_ms >= 0))
    ctx.register_hook("pre_tool_call", lambda c: None)
    ctx.register_hook("post_tool_call", post)
    ctx.register_hook("transform_tool_result", transform)
    ctx.register_tool("seen", {}, lambda: repr([(s, i == seen[0][1], *rest) for s, i, *rest in seen]))
"#;
    let home = home_with(&["seen"]);
    write_plugin(
        &home.path().join("plugins"),
        "seen",
        "name: seen\n",
        &[("__init__.py", SEEN)],
    );
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let rt = rt();
    assert_eq!(
        rt.block_on(host.call_tool("two", json!({}), "s")).text,
        "pipeline-result"
    );
    assert_eq!(
        rt.block_on(host.call_tool("seen", json!({}), "s")).text,
        "[('post', True, 'pipeline-result', True, True), \
         ('transform', True, 'pipeline-result', True, True)]"
    );
}
