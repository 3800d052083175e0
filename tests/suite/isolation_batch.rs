//! An isolated plugin's tool and its own hooks in one round trip (issue 26
//! item 5): whatever the plan, the hooks keep their in-process effects —
//! an argument edited in place, a block, a raising hook (fail-open: the
//! tool runs once), a replaced result, an observer — and another plugin's
//! in-process hook between them still runs in its place (its block stops
//! the tool). Each case runs in-process and isolated, on fresh homes, and
//! both leave the same results and the same trace of side effects.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::isolation::WorkerCommand;
use plughost::plugins::config::Isolation;
use plughost::Host;
use serde_json::json;

const GUARDED: &str = r#"
from flowly.agent.hooks import BlockAction
LOG = {log!r}
def note(what):
    with open(LOG, "a") as f:
        f.write(what + "\n")
def pre(c):
    x = c.params.get("x")
    note("guarded-pre:" + c.tool_name + ":" + str(x))
    if x == "block":
        return BlockAction("guarded blocks it")
    if x == "raise":
        raise RuntimeError("the guard fails")
    c.params["x"] = str(x) + "+pre"
def undo(c):
    x = str(c.params.get("x"))
    if x.startswith("undo") and x.endswith("+pre"):
        c.params["x"] = x[: -len("+pre")]
def post(c):
    note("guarded-post:" + str(c.result) + ":" + str(c.success))
def transform(c):
    note("guarded-transform:" + str(c.result))
    return c.result + " [transformed]"
def echo(x=""):
    note("tool:" + x)
    return "echo:" + x
def fails(x=""):
    note("tool-fails:" + x)
    raise ValueError("the tool fails")
def register(ctx):
    props = {"type": "object", "properties": {"x": {"type": "string"}}}
    ctx.register_tool("echo", props, echo)
    ctx.register_tool("fails", props, fails)
    ctx.register_hook("pre_tool_call", pre)
    ctx.register_hook("pre_tool_call", undo)
    ctx.register_hook("post_tool_call", post)
    ctx.register_hook("transform_tool_result", transform)
"#;

/// An in-process neighbour whose `pre_tool_call` may refuse the call, and
/// whose `post_tool_call` sees the arguments as the call ends.
const NEIGHBOUR: &str = r#"
from flowly.agent.hooks import BlockAction
LOG = {log!r}
def note(what):
    with open(LOG, "a") as f:
        f.write(what + "\n")
def pre(c):
    note("neighbour-pre:" + str(c.params.get("x")))
    if str(c.params.get("x")).startswith("neighbour"):
        return BlockAction("the neighbour blocks it")
def post(c):
    note("neighbour-post:" + str(c.params.get("x")))
def register(ctx):
    ctx.register_hook("pre_tool_call", pre)
    ctx.register_hook("post_tool_call", post)
"#;

/// The results of calling `tool` with each of `xs` twice (the first call
/// learns that the tool has no `check_fn`; the second is planned), and
/// the trace the plugins wrote.
fn run(isolated: bool, neighbour: bool, tool: &str, xs: &[&str]) -> (Vec<String>, String) {
    run_beside(isolated, neighbour.then_some(NEIGHBOUR), tool, xs)
}

/// [`run`] with `neighbour` as the in-process neighbour's source.
fn run_beside(
    isolated: bool,
    neighbour: Option<&str>,
    tool: &str,
    xs: &[&str],
) -> (Vec<String>, String) {
    let keys: &[&str] = if neighbour.is_some() {
        &["guarded", "neighbour"]
    } else {
        &["guarded"]
    };
    let home = home_with(keys);
    let bundled = no_bundled();
    let log = home.path().join("trace.log");
    let log_text = log.display().to_string();
    let source = |template: &str| template.replace("{log!r}", &format!("{log_text:?}"));
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "guarded",
        "name: guarded\n",
        &[("__init__.py", &source(GUARDED))],
    );
    if let Some(neighbour) = neighbour {
        write_plugin(
            &plugins,
            "neighbour",
            "name: neighbour\n",
            &[("__init__.py", &source(neighbour))],
        );
    }
    let isolation = if isolated {
        Isolation::Only(vec!["guarded".into()])
    } else {
        Isolation::None
    };
    let host = host(home.path(), bundled.path(), isolation);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut results = Vec::new();
    for x in xs {
        for _ in 0..2 {
            let r = rt.block_on(host.call_tool(tool, json!({ "x": x }), ""));
            results.push(r.text);
        }
    }
    drop(host);
    (results, std::fs::read_to_string(&log).unwrap_or_default())
}

fn host(home: &Path, bundled: &Path, isolation: Isolation) -> Host {
    Host::builder()
        .home(home)
        .bundled_dir(bundled)
        .worker_command(WorkerCommand::binary(env!("CARGO_BIN_EXE_plughost")))
        .isolate(isolation)
        .build()
        .unwrap()
}

/// Run `f` on its own thread; fail past 60 s instead of hanging.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the case finished in time")
}

fn same_in_process_and_isolated(neighbour: bool, tool: &'static str, xs: &'static [&'static str]) {
    let (in_process, isolated) = bounded(move || {
        (
            run(false, neighbour, tool, xs),
            run(true, neighbour, tool, xs),
        )
    });
    assert_eq!(isolated.0, in_process.0, "the results");
    assert_eq!(isolated.1, in_process.1, "the trace of side effects");
}

#[test]
fn the_plugins_own_hooks_have_their_in_process_effects() {
    same_in_process_and_isolated(false, "echo", &["a", "block", "raise", "b"]);
    // And what they are: the edit reached the tool, the result was
    // transformed, the block stopped it, the raising hook let it run once.
    let (results, trace) = bounded(|| run(true, false, "echo", &["a", "block", "raise"]));
    assert_eq!(results[1], "echo:a+pre [transformed]");
    assert!(results[3].contains("guarded blocks it"), "{results:?}");
    assert_eq!(results[5], "echo:raise [transformed]");
    assert_eq!(
        trace.matches("tool:raise").count(),
        2,
        "once per call: {trace}"
    );
    assert!(!trace.contains("tool:block"), "{trace}");
}

/// An in-process neighbour that only watches the call end: the guarded
/// plugin's pre hooks, tool and post hook go in one batch before it.
const OBSERVER: &str = r#"
LOG = {log!r}
def post(c):
    with open(LOG, "a") as f:
        f.write("observer-post:" + str(c.params.get("x")) + "\n")
def register(ctx):
    ctx.register_hook("post_tool_call", post)
"#;

/// A worker's reply leaves the arguments out when a hook did not change
/// them; a hook that puts back what an earlier one edited changed them,
/// and an in-process hook after them sees it.
#[test]
fn a_hook_that_puts_the_arguments_back_is_heard() {
    let (results, trace) = bounded(|| run_beside(true, Some(OBSERVER), "echo", &["undo"]));
    assert_eq!(results, vec!["echo:undo [transformed]"; 2], "{trace}");
    assert_eq!(trace.matches("observer-post:undo\n").count(), 2, "{trace}");
    let in_process = bounded(|| run_beside(false, Some(OBSERVER), "echo", &["undo"]));
    assert_eq!(trace, in_process.1, "the trace of side effects");
}

#[test]
fn another_plugins_hook_between_them_runs_in_its_place() {
    same_in_process_and_isolated(true, "echo", &["a", "neighbour", "block", "raise"]);
    let (_, trace) = bounded(|| run(true, true, "echo", &["neighbour"]));
    assert!(
        !trace.contains("tool:"),
        "the neighbour's block stops the tool: {trace}"
    );
}

#[test]
fn a_failing_tool_is_rendered_by_plughost_and_seen_by_the_post_hooks() {
    same_in_process_and_isolated(false, "fails", &["a"]);
    same_in_process_and_isolated(true, "fails", &["a", "neighbour"]);
}

/// A tool that crashes its worker on the second and later calls, with
/// hooks before and after it in the plan.
const CRASHING: &str = r#"
import os
def crash(x=""):
    note("tool:" + x)
    if x != "first":
        os.kill(os.getpid(), 9)
    return "ok"
def register(ctx):
    ctx.register_tool("crash", {"type": "object", "properties": {"x": {"type": "string"}}}, crash)
    ctx.register_hook("pre_tool_call", lambda c: None)
    ctx.register_hook("post_tool_call", lambda c: None)
    ctx.register_hook("transform_tool_result", lambda c: None)
"#;

/// A home with the one plugin `key`: `source` after a `note(what)` that
/// appends a line to the home's trace log; the log's path.
fn traced_home(key: &str, source: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let home = home_with(&[key]);
    let log = home.path().join("trace.log");
    let note = format!(
        "def note(what):\n    with open({:?}, \"a\") as f:\n        f.write(what + \"\\n\")\n",
        log.display().to_string()
    );
    let source = format!("{note}{source}");
    write_plugin(
        &home.path().join("plugins"),
        key,
        &format!("name: {key}\n"),
        &[("__init__.py", &source)],
    );
    (home, log)
}

/// A worker killed while the tool of a planned call runs leaves plughost
/// the hooks' answers given before it: the call fails with the crash and
/// the tool is not sent again (it may have done half its work).
#[test]
fn a_tool_that_kills_its_worker_mid_batch_runs_once() {
    let lines = bounded(|| {
        let (home, log) = traced_home("crashing", CRASHING);
        let bundled = no_bundled();
        let host = host(home.path(), bundled.path(), Isolation::All);
        let rt = tokio::runtime::Runtime::new().unwrap();
        for x in ["first", "second", "third"] {
            let r = rt.block_on(host.call_tool("crash", json!({"x": x}), ""));
            assert_eq!(r.text == "ok", x == "first", "{x}: {}", r.text);
        }
        std::fs::read_to_string(&log).unwrap()
    });
    assert_eq!(lines, "tool:first\ntool:second\ntool:third\n");
}

/// Hooks around a tool, all in one batch once warmed up (the pre hook marks
/// the context object, which the post hook sees only when both ran on the
/// worker's one context of a batch); then the tool crashes the worker, or
/// the post or transform hook does, or the tool is slower than the hooks'
/// time limit.
const BATCHED: &str = r#"
import os, time
def tool(x=""):
    note("tool:" + x)
    if x == "tool-crash":
        os.kill(os.getpid(), 9)
    if x == "slow":
        time.sleep(3.0)
    return "ok:" + x
def pre(c):
    note("pre:" + str(c.params.get("x")))
    c.batched = True
def post(c):
    seen = ":one-context" if getattr(c, "batched", False) else ""
    note("post:" + str(c.params.get("x")) + seen)
    if c.params.get("x") == "post-crash":
        os.kill(os.getpid(), 9)
def transform(c):
    if c.params.get("x") == "transform-crash":
        os.kill(os.getpid(), 9)
def register(ctx):
    ctx.register_tool("batched", {"type": "object", "properties": {"x": {"type": "string"}}}, tool)
    ctx.register_hook("pre_tool_call", pre)
    ctx.register_hook("post_tool_call", post)
    ctx.register_hook("transform_tool_result", transform)
"#;

/// What a case leaves: the results of the case's call and of one call
/// after it, the trace of those two, and how many times the pre and the
/// post hook failed.
struct Case {
    results: Vec<String>,
    trace: String,
    pre_errors: u64,
    post_errors: u64,
}

/// Call with `x` after three warm-up calls (the first learns the tool has
/// no `check_fn`; the others go in one batch, as the case does), the
/// hooks' time limit `limit` (a restart after a crash runs within the
/// next hook's limit: the crash cases give a slow machine room).
fn batch_case(x: &'static str, limit: Duration) -> Case {
    bounded(move || {
        let (home, log) = traced_home("batched", BATCHED);
        let bundled = no_bundled();
        let host = Host::builder()
            .home(home.path())
            .bundled_dir(bundled.path())
            .worker_command(WorkerCommand::binary(env!("CARGO_BIN_EXE_plughost")))
            .isolate(Isolation::All)
            .hook_timeout(limit)
            .build()
            .unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        for _ in 0..3 {
            let r = rt.block_on(host.call_tool("batched", json!({"x": "warm"}), ""));
            assert_eq!(r.text, "ok:warm");
        }
        let warm = std::fs::read_to_string(&log).unwrap();
        assert!(
            warm.ends_with("post:warm:one-context\n"),
            "the warm-up went in one batch: {warm}"
        );
        std::fs::write(&log, "").unwrap();
        let results = [x, "after"]
            .iter()
            .map(|x| {
                rt.block_on(host.call_tool("batched", json!({ "x": x }), ""))
                    .text
            })
            .collect();
        let registry = host.registry();
        let errors = |event| registry.hooks().entries(event)[0].stats.errors();
        let (pre_errors, post_errors) = (
            errors(plughost::HookEvent::ToolGuard),
            errors(plughost::HookEvent::ToolDone),
        );
        drop(host);
        Case {
            results,
            trace: std::fs::read_to_string(&log).unwrap(),
            pre_errors,
            post_errors,
        }
    })
}

/// Room for a worker's restart within a hook's limit, on a busy machine.
const ROOM: Duration = Duration::from_secs(10);

/// The worker dies in the tool: the pre hook, which answered before, is
/// not blamed, the tool is not sent again, and the next call gets a fresh
/// worker.
#[test]
fn a_tool_crash_in_a_batch_fails_the_call_once_and_blames_the_tool() {
    let case = batch_case("tool-crash", ROOM);
    assert!(case.results[0].contains("crashed"), "{}", case.results[0]);
    assert_eq!(case.results[1], "ok:after");
    let trace = &case.trace;
    assert_eq!(trace.matches("tool:tool-crash").count(), 1, "{trace}");
    assert!(
        trace.starts_with("pre:tool-crash\ntool:tool-crash\n"),
        "{trace}"
    );
    assert_eq!(case.pre_errors, 0);
}

/// The worker dies in the post hook, an observer: the call keeps the
/// tool's result (its answer came before the crash), and neither the tool
/// nor the post hook runs again.
#[test]
fn a_post_hook_crash_in_a_batch_keeps_the_result_and_runs_nothing_twice() {
    let case = batch_case("post-crash", ROOM);
    assert_eq!(case.results, ["ok:post-crash", "ok:after"]);
    let trace = &case.trace;
    assert_eq!(trace.matches("tool:post-crash").count(), 1, "{trace}");
    assert_eq!(trace.matches("post:post-crash").count(), 1, "{trace}");
    assert_eq!((case.pre_errors, case.post_errors), (0, 1));
}

/// The worker dies in the transform hook: the post hook's answer, given
/// before, is kept (it is not counted as failed), and the result is the
/// tool's.
#[test]
fn a_transform_crash_in_a_batch_keeps_the_answers_before_it() {
    let case = batch_case("transform-crash", ROOM);
    assert_eq!(case.results, ["ok:transform-crash", "ok:after"]);
    let trace = &case.trace;
    assert_eq!(trace.matches("tool:transform-crash").count(), 1, "{trace}");
    assert_eq!((case.pre_errors, case.post_errors), (0, 0));
}

/// A tool slower than the hooks' time limit, in a batch with them: each
/// hook's limit covers its own step only, so the call succeeds.
#[test]
fn a_batched_tool_slower_than_the_hook_limit_is_not_cut_off() {
    let case = batch_case("slow", Duration::from_secs(1));
    assert_eq!(case.results, ["ok:slow", "ok:after"]);
    assert_eq!((case.pre_errors, case.post_errors), (0, 0));
    assert_eq!(case.trace.matches("tool:slow").count(), 1, "{}", case.trace);
}
