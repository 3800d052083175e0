//! Felix and Codumentor plugins run isolated (`plugins.isolate`): their
//! loop-point hooks are forwarded to the worker and their answers come
//! back, so every return convention has the same effect as in-process.
//! Observed as tests/felix.rs and tests/codumentor.rs observe them: through
//! `plughost run --json` with a scripted model, each plugin run in-process
//! and isolated with the same script and compared field by field.
use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::run_bounded;
use serde_json::{json, Value};

/// A home with plugins, run through the CLI.
struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: tempfile::tempdir().unwrap(),
            bundled: common::no_bundled(),
        };
        std::fs::create_dir_all(env.plugins()).unwrap();
        env
    }

    fn plugins(&self) -> PathBuf {
        self.home.path().join("plugins")
    }

    fn log(&self) -> PathBuf {
        self.home.path().join("events.log")
    }

    fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `config.json` enabling `enabled`, isolating `isolated`.
    fn config(&self, enabled: &[&str], isolated: &[&str]) {
        let config = json!({"plugins": {"enabled": enabled, "isolate": isolated}});
        std::fs::write(self.home.path().join("config.json"), config.to_string()).unwrap();
    }

    /// A Codumentor plugin: `plugins/<key>/plugin.yaml` + `backend/`.
    fn codumentor(&self, key: &str, entry: &str, args: &str, files: &[(&str, &str)]) {
        let dir = self.plugins().join(key);
        std::fs::create_dir_all(dir.join("backend")).unwrap();
        std::fs::write(
            dir.join("plugin.yaml"),
            format!("name: {key}\ndialect: codumentor\nentry: {entry}\n{args}"),
        )
        .unwrap();
        for (name, text) in files {
            let file = dir.join("backend").join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
    }

    /// A Felix source tree: `pyproject.toml` + `src/<package>/__init__.py`.
    fn felix(&self, dir: &str, entry: (&str, &str), package: &str, code: &str) {
        let path = self.plugins().join(dir);
        std::fs::create_dir_all(path.join("src").join(package)).unwrap();
        let toml = format!(
            "[project]\nname = \"{dir}\"\nversion = \"1.0.0\"\n\n[project.entry-points.\"felix.plugins\"]\n{} = \"{}\"\n",
            entry.0, entry.1
        );
        std::fs::write(path.join("pyproject.toml"), toml).unwrap();
        std::fs::write(path.join("src").join(package).join("__init__.py"), code).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("CODU_LOG", self.log())
            .env("HERMES_HOME", self.home.path().join("no-hermes"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("PYTHONPATH")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS");
        run_bounded(cmd, Duration::from_secs(60))
    }

    /// `run --json` of `message` with the scripted model: the report. The
    /// hook budget is generous: a handler after a crash waits for its
    /// worker to restart within it.
    fn turn(&self, script: &str, session: &str, message: &str) -> Value {
        self.turn_with(script, session, message, &[])
    }

    /// [`Env::turn`] with `extra` options.
    fn turn_with(&self, script: &str, session: &str, message: &str, extra: &[&str]) -> Value {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, script).unwrap();
        let mut args = vec![
            "run",
            "--json",
            "--model",
            "scripted",
            "--script",
            path.to_str().unwrap(),
            "--hook-timeout",
            "10",
            "--session",
            session,
        ];
        args.extend_from_slice(extra);
        args.push(message);
        let out = self.run(&args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "no report ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    fn transcript(&self, session: &str) -> String {
        std::fs::read_to_string(self.home.path().join(format!("sessions/{session}.jsonl")))
            .unwrap_or_default()
    }

    fn listed(&self) -> Vec<Value> {
        let out = self.run(&["plugins", "list", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

/// The fields of a report an isolated run must reproduce (everything but
/// timings, process-specific ids, and the home's path, which differs
/// between the two runs).
fn observed(env: &Env, report: &Value) -> Value {
    let home = env.home.path().to_string_lossy().into_owned();
    let text = report.to_string().replace(&home, "<home>");
    let report: Value = serde_json::from_str(&text).unwrap();
    let mut tool_calls = report["tool_calls"].clone();
    for call in tool_calls.as_array_mut().into_iter().flatten() {
        if let Some(c) = call.as_object_mut() {
            c.retain(|k, _| !k.contains("ms") && k != "id" && k != "tool_call_id");
        }
    }
    json!({
        "completed": report["completed"],
        "reply": report["reply"],
        "ended_by": report["ended_by"],
        "aborted": report["aborted"],
        "model_calls": report["model_calls"],
        "tool_calls": tool_calls,
        "hook_errors": report["hook_errors"],
        "ui_events": report["ui_events"],
    })
}

/// Whether plugin `key` is isolated (it must have loaded).
fn isolated_flag(env: &Env, key: &str) -> bool {
    let listed = env.listed();
    let plugin = listed
        .iter()
        .find(|p| p["key"] == key)
        .unwrap_or_else(|| panic!("no plugin '{key}' in {listed:#?}"));
    assert_eq!(plugin["loaded"], true, "{plugin:#}");
    plugin["isolated"] == true
}

/// A Felix plugin using every hook kind whose answer changes the turn.
const FELIX: &str = r#"
from felix_ai.types import ChatMessage
from felix.tools.types import define_tool, ToolOutputDict
from felix.tools.errors import tool_error_output

class Plugin:
    def register_tools(self, register):
        register("felix_echo", lambda: define_tool(
            name="felix_echo", description="Echo the text",
            args_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            handler=lambda a, ctx: f"echo {a['text']} thread={ctx.thread_id} manifest={ctx.manifest_id}"))
        def fail(a):
            raise PermissionError("forbidden: /etc/secret")
        register("felix_fail", lambda: define_tool(name="felix_fail", description="Fails", handler=fail))
        register("felix_soft_error", lambda: define_tool(name="felix_soft_error", description="Soft error",
            handler=lambda a: tool_error_output("not_found", "[error/not_found] nothing there")))

def before_turn(messages, ctx):
    return [ChatMessage(role="user", content=f"NOTE for {ctx['thread_id']} ({ctx['manifest_id']})")]

def before_model(request, ctx):
    extra = ChatMessage(role="user", content=f"PER-CALL {ctx['purpose']} tools={','.join(sorted(request['tools']))}")
    return {"messages": request["messages"] + [extra]}

def filter_history(messages, ctx):
    return [m for m in messages if "forget" not in (m.content or "")]

def drop_dropped(response, ctx):
    message = response["message"]
    kept = [c for c in message.tool_calls or [] if c.name != "felix_dropped"]
    if len(kept) == len(message.tool_calls or []):
        return None
    return {"message": ChatMessage(role="assistant", content=message.content, tool_calls=kept)}

def raising_after_model(response, ctx):
    raise ValueError("after_model is broken")

async def guard(call, ctx):
    if call["name"] == "felix_echo" and call["args"].get("text") == "secret":
        return {"block": True, "reason": "no secrets"}
    if call["name"] == "felix_echo" and call["args"].get("text") == "quiet":
        return {"block": True}
    if call["name"] == "felix_echo" and call["args"].get("text") == "deny":
        return {"deny": True}
    if call["name"] == "felix_echo" and call["args"].get("text") == "stop":
        return {"block": True, "reason": "stop here", "terminate": True}
    return None

def second_guard(call, ctx):
    if call["args"].get("text") == "secret":
        raise AssertionError("second guard must not run after a block")
    return None

def redact(call, result, is_error, ctx):
    if call["name"] == "felix_fail":
        return {"content": "redacted"}
    if call["name"] == "felix_echo":
        return {"content": result + " [first]"}
    return None

def later_wins(call, result, is_error, ctx):
    if call["name"] == "felix_echo":
        return {"content": result + " [second]"}
    return None

def register(registry):
    registry.register_plugin(Plugin())
    registry.register_before_turn(before_turn)
    registry.register_before_model(before_model)
    registry.register_filter_history(filter_history)
    registry.register_after_model(drop_dropped)
    registry.register_after_model(raising_after_model)
    registry.register_before_tool(guard)
    registry.register_before_tool(second_guard)
    registry.register_after_tool(redact)
    registry.register_after_tool(later_wins)
"#;

const FELIX_SCRIPT: &str = r#"
turns:
  - say: "Working."
    tool_calls:
      - name: felix_echo
        args: {text: "hi"}
      - name: felix_fail
        args: {}
      - name: felix_echo
        args: {text: "secret"}
      - name: felix_echo
        args: {text: "quiet"}
      - name: felix_echo
        args: {text: "deny"}
      - name: felix_soft_error
        args: {}
      - name: felix_dropped
        args: {}
  - say: "All done."
"#;

/// Run the Felix plugin's turns with it in-process, then isolated.
fn felix_reports(isolate: bool) -> (Env, Vec<Value>) {
    let env = Env::new();
    env.felix(
        "felix-probe",
        ("probe", "felix_probe:register"),
        "felix_probe",
        FELIX,
    );
    let isolated: &[&str] = if isolate { &["probe"] } else { &[] };
    env.config(&["probe"], isolated);
    assert_eq!(isolated_flag(&env, "probe"), isolate);
    let reports = vec![
        env.turn("turns:\n  - say: \"noted\"\n", "h", "please forget this"),
        env.turn(FELIX_SCRIPT, "h", "next"),
        env.turn(
            "turns:\n  - say: \"Stopping now.\"\n    tool_calls:\n      - name: felix_echo\n        args: {text: stop}\n  - say: never\n",
            "term",
            "go",
        ),
    ];
    (env, reports)
}

#[test]
fn an_isolated_felix_plugin_has_every_effect_it_has_in_process() {
    let (in_env, in_process) = felix_reports(false);
    let (env, isolated) = felix_reports(true);
    for (i, (a, b)) in in_process.iter().zip(&isolated).enumerate() {
        let (a, b) = (observed(&in_env, a), observed(&env, b));
        assert_eq!(a, b, "turn {i} differs isolated:\n{a:#}\n{b:#}");
    }
    // What they agree on is the plugin's effects (not a run where nothing happened).
    let report = &isolated[1];
    assert_eq!(report["ended_by"], "answer", "{report:#}");
    assert_eq!(report["reply"], "All done.");
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(
        calls.len(),
        6,
        "after_model dropped felix_dropped: {calls:#?}"
    );
    assert_eq!(
        calls[0]["result"],
        "echo hi thread=h manifest=main [second]"
    );
    assert_eq!(calls[1]["result"], "[error/permission_denied] redacted");
    assert_eq!(calls[2]["result"], "[error/blocked] no secrets");
    assert_eq!(calls[2]["outcome"], "blocked");
    assert_eq!(
        calls[3]["result"],
        "[error/blocked] blocked by before_tool hook"
    );
    assert_eq!(
        calls[4]["result"],
        "echo deny thread=h manifest=main [second]"
    );
    assert_eq!(calls[5]["result"], "[error/not_found] nothing there");
    let model_calls = report["model_calls"].as_array().unwrap();
    let contents = |call: &Value| -> Vec<String> {
        call["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let second = contents(&model_calls[1]);
    assert!(!second.iter().any(|m| m.contains("forget")), "{second:#?}");
    assert_eq!(
        second
            .iter()
            .filter(|m| m.starts_with("NOTE for h (main)"))
            .count(),
        2,
        "{second:#?}"
    );
    assert!(second.last().unwrap().starts_with("PER-CALL turn tools="));
    let errors = report["hook_errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["event"] == "after_model"
            && e["plugin"] == "probe"
            && e["dialect"] == "felix"
            && e["handler"] == "felix_probe.raising_after_model"
            && e["error"] == "ValueError: after_model is broken"),
        "{errors:#?}"
    );
    assert!(
        errors.iter().any(|e| e["event"] == "before_tool"
            && e["error"] == "answered {'deny': True} without a 'block' key; treated as allow"),
        "{errors:#?}"
    );
    let stop = &isolated[2];
    assert_eq!(stop["ended_by"], "tool_terminate", "{stop:#}");
    assert_eq!(stop["reply"], "Stopping now.");
    assert_eq!(stop["tool_calls"][0]["result"], "[error/blocked] stop here");
    // The transcript keeps what filter_history hid, and none of the notes.
    let transcript = env.transcript("h");
    assert!(transcript.contains("please forget this"));
    assert!(!transcript.contains("NOTE for") && !transcript.contains("PER-CALL"));
}

const FATAL: &str = r#"
import os
from felix.tools.types import define_tool
from felix.tools.errors import tool_error_output

class Plugin:
    def register_tools(self, register):
        def explode(a):
            raise RuntimeError("the disk is gone")
        register("felix_fatal", lambda: define_tool(
            name="felix_fatal", description="Fails fatally", handler=explode, fatal=True))
        register("felix_fatal_soft", lambda: define_tool(
            name="felix_fatal_soft", description="Returns an error", fatal=True,
            handler=lambda a: tool_error_output("not_found", "[error/not_found] nothing there")))
        register("felix_plain_fail", lambda: define_tool(
            name="felix_plain_fail", description="Fails", handler=explode))
        register("felix_fatal_crash", lambda: define_tool(
            name="felix_fatal_crash", description="Dies", fatal=True,
            handler=lambda a: os._exit(5)))
        register("felix_where", lambda: define_tool(
            name="felix_where", description="Where am I",
            handler=lambda a, ctx: f"manifest={ctx.manifest_id}"))

def register(registry):
    registry.register_plugin(Plugin())
"#;

#[test]
fn an_isolated_fatal_felix_tool_ends_the_turn_after_its_batch() {
    let env = Env::new();
    env.felix(
        "felix-fatal",
        ("fatal", "felix_fatal:register"),
        "felix_fatal",
        FATAL,
    );
    env.config(&["fatal"], &["fatal"]);
    assert!(isolated_flag(&env, "fatal"));
    let report = env.turn(
        "turns:\n  - say: \"Trying both.\"\n    tool_calls:\n      - name: felix_fatal\n        args: {}\n      - name: felix_where\n        args: {}\n  - say: never\n",
        "fatal",
        "go",
    );
    assert_eq!(report["ended_by"], "tool_terminate", "{report:#}");
    assert_eq!(report["reply"], "Trying both.");
    assert_eq!(report["model_calls"].as_array().unwrap().len(), 1);
    let result = report["tool_calls"][0]["result"].as_str().unwrap();
    assert!(
        result.starts_with("[fatal/internal] the disk is gone"),
        "{result}"
    );
    assert_eq!(report["tool_calls"][1]["result"], "manifest=main");
    // Neither a returned error of a fatal tool nor a non-fatal tool raising ends it.
    for tool in ["felix_fatal_soft", "felix_plain_fail"] {
        let report = env.turn(
            &format!("turns:\n  - say: \"Trying.\"\n    tool_calls:\n      - name: {tool}\n        args: {{}}\n  - say: carried on\n"),
            tool,
            "go",
        );
        assert_eq!(report["ended_by"], "answer", "{tool}: {report:#}");
        assert_eq!(report["reply"], "carried on");
        assert!(report["tool_calls"][0]["result"]
            .as_str()
            .unwrap()
            .starts_with("[error/"));
    }
    // A fatal tool whose worker dies under it: the crash is not the tool
    // raising, so the turn goes on (the model sees the crash).
    let report = env.turn(
        "turns:\n  - say: \"Trying.\"\n    tool_calls:\n      - name: felix_fatal_crash\n        args: {}\n  - say: carried on\n",
        "crash",
        "go",
    );
    assert_eq!(report["ended_by"], "answer", "{report:#}");
    assert_eq!(report["reply"], "carried on");
    assert_eq!(
        report["tool_calls"][0]["result"],
        "plugin 'fatal' crashed (exit code 5)"
    );
}

/// A Codumentor plugin as the seed's authors write one: settings from
/// `**kwargs`, handlers sharing the turn's `ctx`, every answer type that
/// changes a turn, chosen by `mode`.
const CODU: &str = r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Probe:
    def __init__(self, config=None, **kwargs):
        self.mode = kwargs.get("mode", "normal")

    async def register(self, bus):
        bus.on("onInputReceived", self.on_input, priority=10)
        bus.on("onPromptAssemble", self.on_prompt, priority=50)
        bus.on("onLLMCallStart", self.on_call_start)
        bus.on("onLLMCallEnd", self.first_end, priority=1)
        bus.on("onLLMCallEnd", self.second_end, priority=2)
        bus.on("onAfterLLM", self.after_llm)
        bus.on("onToolInvokeStart", self.veto, priority=10)
        bus.on("onToolInvokeStart", self.abort, priority=20)
        bus.on("onToolInvokeStart", self.patch_args, priority=30)
        bus.on("onToolInvokeEnd", self.on_tool_end)
        bus.on("onAfterPromptAssemble", self.raiser, priority=1)
        bus.on("onAfterPromptAssemble", self.defer, priority=2)
        bus.on("onAfterPromptAssemble", self.after_defer, priority=3)
        bus.on("onBeforeSendResponse", self.before_send)
        bus.on("onTurnAborted", self.aborted)

    def seen(self, ctx, what):
        ctx.setdefault("seen", []).append(what)

    async def on_input(self, agent, ctx, payload):
        self.seen(ctx, "input")
        return {"type": "continue", "patch": {"raw": payload["raw"].replace("please", "kindly")}}

    async def on_prompt(self, agent, ctx, payload):
        self.seen(ctx, f"prompt{ctx['step']}")
        messages = payload["messages"]
        if not any(m.get("content") == "[Probe] be brief" for m in messages):
            messages = [messages[0], {"role": "system", "content": "[Probe] be brief"}] + messages[1:]
        return {"type": "continue", "patch": {"messages": messages}}

    async def on_call_start(self, agent, ctx, payload):
        return {"type": "param_patch", "model": "routed-model", "params": {"temperature": 0.2}}

    async def first_end(self, agent, ctx, payload):
        return {"type": "continue", "patch": {"marker": "from first"}}

    async def second_end(self, agent, ctx, payload):
        log(f"second_end saw {payload.get('marker')}")

    async def after_llm(self, agent, ctx, payload):
        if self.mode == "llm":
            return {"type": "short_circuit", "assistant_text": "cut short"}

    async def veto(self, agent, ctx, payload):
        if payload["args"].get("path") == "/nowhere" or self.mode == "abort":
            return {"type": "veto_tool", "reason": "not there"}

    async def abort(self, agent, ctx, payload):
        if self.mode == "abort":
            return {"type": "abort_turn", "reason": "budget exhausted", "assistant_text": "Stopping here."}

    async def patch_args(self, agent, ctx, payload):
        if payload["args"].get("path") == "elsewhere":
            return {"type": "continue", "patch": {"args": {"path": "."}}}

    async def on_tool_end(self, agent, ctx, payload):
        self.seen(ctx, "tool " + payload["tool"])
        return {"type": "continue", "patch": {"result": payload["result"][:10] + " (checked)"}}

    async def raiser(self, agent, ctx, payload):
        raise KeyError("missing index")

    async def defer(self, agent, ctx, payload):
        return {"type": "defer"}

    async def after_defer(self, agent, ctx, payload):
        log("after defer ran")

    async def before_send(self, agent, ctx, payload):
        await ctx["ui_event_emitter"]("plugin.probe.seen", {"seen": ctx.get("seen"), "neighbour": ctx.get("neighbour")}, None)
        return {"type": "replace", "value": {"assistant_text": payload["assistant_text"].upper()}}

    async def aborted(self, agent, ctx, payload):
        log(f"aborted {payload['reason']} / {payload['assistant_text']}")
"#;

const CODU_SCRIPT: &str = r#"
turns:
  - say: "Listing."
    tool_calls:
      - name: list_dir
        args: {path: "elsewhere"}
      - name: list_dir
        args: {path: "/nowhere"}
  - say: "listed"
"#;

fn codu_reports(isolate: bool) -> (Env, Vec<Value>) {
    let env = Env::new();
    let isolated: &[&str] = if isolate { &["probe"] } else { &[] };
    let mut reports = Vec::new();
    for mode in ["normal", "llm", "abort"] {
        env.codumentor(
            "probe",
            "probe_pkg:Probe",
            &format!("args: {{mode: {mode}}}\n"),
            &[("probe_pkg/__init__.py", CODU)],
        );
        env.config(&["probe"], isolated);
        reports.push(env.turn(CODU_SCRIPT, mode, "please list"));
    }
    assert_eq!(isolated_flag(&env, "probe"), isolate);
    (env, reports)
}

#[test]
fn an_isolated_codumentor_plugin_has_every_effect_it_has_in_process() {
    let (in_env, in_process) = codu_reports(false);
    let (env, isolated) = codu_reports(true);
    for (i, (a, b)) in in_process.iter().zip(&isolated).enumerate() {
        let (a, b) = (observed(&in_env, a), observed(&env, b));
        assert_eq!(a, b, "turn {i} differs isolated:\n{a:#}\n{b:#}");
    }
    assert_eq!(in_env.log_lines(), env.log_lines());

    let normal = &isolated[0];
    assert_eq!(normal["ended_by"], "answer", "{normal:#}");
    assert_eq!(normal["reply"], "LISTED");
    // The handlers of the turn shared one ctx: the ui event shows them all
    // (a vetoed call never reaches onToolInvokeEnd).
    assert_eq!(
        normal["ui_events"],
        json!([{"type": "plugin.probe.seen", "data": {"seen":
            ["input", "prompt1", "tool list_dir", "prompt2"], "neighbour": null}}]),
        "{normal:#}"
    );
    let calls = normal["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["model"], "routed-model");
    assert_eq!(calls[0]["params"], json!({"temperature": 0.2}));
    let first = calls[0]["messages"].as_array().unwrap();
    assert_eq!(first[1]["content"], "[Probe] be brief");
    assert_eq!(first.last().unwrap()["content"], "kindly list");
    let tools = normal["tool_calls"].as_array().unwrap();
    assert!(
        tools[0]["result"].as_str().unwrap().ends_with(" (checked)"),
        "the args patch made it run on '.': {tools:#?}"
    );
    assert_eq!(tools[0]["outcome"], "ok");
    assert_eq!(tools[1]["result"], "[blocked: not there]");
    assert_eq!(tools[1]["outcome"], "blocked");
    // The raising handler is reported per call; defer stopped its chain.
    let errors = normal["hook_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_eq!(errors[0]["plugin"], "probe");
    assert_eq!(errors[0]["dialect"], "codumentor");
    assert_eq!(errors[0]["event"], "onAfterPromptAssemble");
    assert_eq!(errors[0]["handler"], "probe_pkg.Probe.raiser");
    assert_eq!(errors[0]["error"], "KeyError: 'missing index'");
    let log = env.log_lines();
    assert!(!log.contains(&"after defer ran".to_string()), "{log:?}");
    assert!(
        log.contains(&"second_end saw from first".to_string()),
        "a chain's later handler sees the earlier one's patch: {log:?}"
    );

    let llm = &isolated[1];
    assert_eq!(llm["ended_by"], "short_circuit", "{llm:#}");
    assert_eq!(llm["reply"], "CUT SHORT");
    assert_eq!(llm["tool_calls"], json!([]));

    let abort = &isolated[2];
    assert_eq!(abort["ended_by"], "aborted", "{abort:#}");
    assert_eq!(abort["aborted"], "budget exhausted");
    assert_eq!(abort["reply"], "Stopping here.");
    assert_eq!(abort["tool_calls"][0]["outcome"], "blocked");
    assert!(log.contains(&"aborted budget exhausted / Stopping here.".to_string()));
}

/// An in-process plugin in the same chains as the isolated one.
const NEIGHBOUR: &str = r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Neighbour:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onLLMCallEnd", self.before, priority=0)
        bus.on("onLLMCallEnd", self.after, priority=5)
        bus.on("onAfterPromptAssemble", self.after_defer, priority=9)

    async def before(self, agent, ctx, payload):
        ctx["neighbour"] = "here"
        return {"type": "continue", "patch": {"marker": "from neighbour"}}

    async def after(self, agent, ctx, payload):
        log(f"neighbour saw {payload.get('marker')}")
        log(f"neighbour's ctx has {ctx.get('neighbour')}")

    async def after_defer(self, agent, ctx, payload):
        log("neighbour ran after defer")
"#;

#[test]
fn in_process_and_isolated_codumentor_handlers_form_one_chain() {
    let env = Env::new();
    env.codumentor(
        "probe",
        "probe_pkg:Probe",
        "",
        &[("probe_pkg/__init__.py", CODU)],
    );
    env.codumentor(
        "neighbour",
        "neighbour_pkg:Neighbour",
        "",
        &[("neighbour_pkg/__init__.py", NEIGHBOUR)],
    );
    env.config(&["probe", "neighbour"], &["probe"]);
    assert!(isolated_flag(&env, "probe"));
    assert!(!isolated_flag(&env, "neighbour"));
    let report = env.turn(CODU_SCRIPT, "mixed", "please list");
    assert_eq!(report["ended_by"], "answer", "{report:#}");
    let log = env.log_lines();
    // neighbour (in-process, 0) → probe first_end (isolated, 1) → probe
    // second_end (isolated, 2) → neighbour after (in-process, 5).
    assert!(
        log.contains(&"second_end saw from first".to_string()),
        "{log:?}"
    );
    assert!(
        log.contains(&"neighbour saw from first".to_string()),
        "the isolated patch reached the in-process handler after it: {log:?}"
    );
    // The isolated plugin's defer stops the in-process handler after it.
    assert!(
        !log.contains(&"neighbour ran after defer".to_string()),
        "{log:?}"
    );
    // An isolated plugin's ctx is its own: the neighbour's key is not in it.
    let seen = &report["ui_events"][0]["data"]["seen"];
    assert_eq!(seen[0], "input", "{report:#}");
    assert_eq!(report["ui_events"][0]["data"]["neighbour"], Value::Null);
    assert!(
        log.contains(&"neighbour's ctx has here".to_string()),
        "{log:?}"
    );
}

/// A Codumentor plugin whose prompt handler kills its process the first
/// time it runs (a native crash, as far as plughost can tell).
const CRASHY: &str = r#"
import os


class Crashy:
    def __init__(self, config=None, **kwargs):
        self.marker = kwargs["marker"]

    async def register(self, bus):
        bus.on("onAfterPromptAssemble", self.crash)
        bus.on("onBeforeSendResponse", self.before_send)

    async def crash(self, agent, ctx, payload):
        if not os.path.exists(self.marker):
            open(self.marker, "w").write("crashed")
            os._exit(3)

    async def before_send(self, agent, ctx, payload):
        return {"type": "continue", "patch": {"assistant_text": payload["assistant_text"] + " (after restart)"}}
"#;

/// A Felix plugin whose before_tool hook kills its process every time.
const FELIX_CRASHY: &str = r#"
import os
from felix.tools.types import define_tool

class Plugin:
    def register_tools(self, register):
        register("felix_echo", lambda: define_tool(
            name="felix_echo", description="Echo", handler=lambda a: "echo " + a["text"]))

def crash(call, ctx):
    os._exit(4)

def register(registry):
    registry.register_plugin(Plugin())
    registry.register_before_tool(crash)
"#;

#[test]
fn a_worker_crash_in_a_loop_point_hook_fails_open_and_the_worker_restarts() {
    let env = Env::new();
    let marker = env.home.path().join("crashed-once");
    env.codumentor(
        "crashy",
        "crashy_pkg:Crashy",
        &format!("args: {{marker: \"{}\"}}\n", marker.display()),
        &[("crashy_pkg/__init__.py", CRASHY)],
    );
    env.felix(
        "felix-crashy",
        ("fcrash", "felix_crashy:register"),
        "felix_crashy",
        FELIX_CRASHY,
    );
    env.config(&["crashy", "fcrash"], &["crashy", "fcrash"]);
    let report = env.turn(
        "turns:\n  - say: \"Echoing.\"\n    tool_calls:\n      - name: felix_echo\n        args: {text: hi}\n  - say: \"done\"\n",
        "crash",
        "hi",
    );
    assert!(marker.is_file(), "the hook ran in its worker");
    assert_eq!(report["completed"], true, "{report:#}");
    assert_eq!(report["ended_by"], "answer");
    // The Codumentor worker came back: its later handler had its effect.
    assert_eq!(report["reply"], "done (after restart)", "{report:#}");
    // The guard crashed its worker: fail open, the call went through (on
    // the restarted worker).
    assert_eq!(report["tool_calls"][0]["result"], "echo hi", "{report:#}");
    let errors = report["hook_errors"].as_array().unwrap();
    let crashed = |plugin: &str, event: &str| {
        errors
            .iter()
            .filter(|e| e["plugin"] == plugin && e["event"] == event)
            .map(|e| e["error"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // Only the first call crashed (the restarted worker found the marker).
    assert_eq!(
        crashed("crashy", "onAfterPromptAssemble"),
        ["plugin 'crashy' crashed (exit code 3)"],
        "{errors:#?}"
    );
    assert_eq!(
        crashed("fcrash", "before_tool"),
        ["plugin 'fcrash' crashed (exit code 4)"],
        "{errors:#?}"
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

/// Handlers that fail every way a hook can: raising, outliving
/// `--hook-timeout`, answering a wrong shape; and a `defer` after them.
const FAULTS: &str = r#"
import asyncio, os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Faults:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onPromptAssemble", self.raiser, priority=1)
        bus.on("onPromptAssemble", self.hanger, priority=2)
        bus.on("onPromptAssemble", self.wrong_shape, priority=3)
        bus.on("onPromptAssemble", self.defer, priority=4)
        bus.on("onPromptAssemble", self.after_defer, priority=5)
        bus.on("onBeforeSendResponse", self.before_send)

    async def raiser(self, agent, ctx, payload):
        raise KeyError("missing index")

    async def hanger(self, agent, ctx, payload):
        await asyncio.sleep(30)

    async def wrong_shape(self, agent, ctx, payload):
        return {"type": "continue", "patch": "not a dict"}

    async def defer(self, agent, ctx, payload):
        return {"type": "defer"}

    async def after_defer(self, agent, ctx, payload):
        log("after defer ran")

    async def before_send(self, agent, ctx, payload):
        return {"type": "continue", "patch": {"assistant_text": payload["assistant_text"] + "!"}}
"#;

#[test]
fn isolated_codumentor_handlers_fail_open_as_in_process_ones_do() {
    let run = |isolate: bool| {
        let env = Env::new();
        env.codumentor(
            "faults",
            "faults_pkg:Faults",
            "",
            &[("faults_pkg/__init__.py", FAULTS)],
        );
        env.config(&["faults"], if isolate { &["faults"] } else { &[] });
        assert_eq!(isolated_flag(&env, "faults"), isolate);
        let path = env.home.path().join("script.yaml");
        std::fs::write(&path, "turns:\n  - say: \"listed\"\n").unwrap();
        let out = env.run(&[
            "run",
            "--json",
            "--model",
            "scripted",
            "--script",
            path.to_str().unwrap(),
            "--hook-timeout",
            "3",
            "--session",
            "f",
            "hi",
        ]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let observed = observed(&env, &report);
        (env, observed)
    };
    let (_in_env, in_process) = run(false);
    let (env, isolated) = run(true);
    assert_eq!(in_process, isolated, "{in_process:#}\n{isolated:#}");
    assert_eq!(isolated["completed"], true);
    assert_eq!(isolated["reply"], "listed!");
    let errors = isolated["hook_errors"].as_array().unwrap();
    let of = |handler: &str| -> Vec<String> {
        errors
            .iter()
            .filter(|e| e["handler"] == format!("faults_pkg.Faults.{handler}"))
            .map(|e| e["error"].as_str().unwrap().to_string())
            .collect()
    };
    // The hanger's worker is stopped; the handlers after it run on a new
    // one (its start counts in the next handler's budget of 3 s).
    assert_eq!(of("raiser"), ["KeyError: 'missing index'"]);
    assert_eq!(of("hanger"), ["timed out after 3 s and was skipped"]);
    let wrong = of("wrong_shape");
    assert_eq!(wrong.len(), 1, "{errors:#?}");
    assert!(wrong[0].contains("'patch' must be a dict"), "{wrong:?}");
    assert!(!env.log_lines().contains(&"after defer ran".to_string()));
}

/// A plugin that keeps an object in the turn's ctx, which says when it is
/// freed.
const TRACKER: &str = r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Tracker:
    def __init__(self, label):
        self.label = label

    def __del__(self):
        log(f"ctx of {self.label} freed")


class Keeper:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onInputReceived", self.on_input)
        bus.on("onBeforeSendResponse", self.before_send)

    async def on_input(self, agent, ctx, payload):
        log(f"input {payload['raw']} found {ctx.get('tracker') is not None}")
        ctx["tracker"] = Tracker(payload["raw"])

    async def before_send(self, agent, ctx, payload):
        log(f"send with {ctx['tracker'].label}")
"#;

#[test]
fn an_isolated_plugins_ctx_lives_for_its_turn() {
    let env = Env::new();
    env.codumentor(
        "keeper",
        "keeper_pkg:Keeper",
        "",
        &[("keeper_pkg/__init__.py", TRACKER)],
    );
    env.config(&["keeper"], &["keeper"]);
    assert!(isolated_flag(&env, "keeper"));
    let script = env.home.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - say: one\n  - say: two\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["chat", "--script", script.to_str().unwrap()])
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env("CODU_LOG", env.log())
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .stdin(std::process::Stdio::piped());
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    use std::io::Write;
    writeln!(stdin, "first").unwrap();
    // The first turn's ctx is freed in its worker once the turn is over,
    // while plughost lives on (a worker that exits runs no finalizers).
    let freed = "ctx of first freed".to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !env.log_lines().contains(&freed) {
        assert!(
            std::time::Instant::now() < deadline,
            "the first turn's ctx was never freed: {:?}",
            env.log_lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    writeln!(stdin, "second").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success());
    let log = env.log_lines();
    // Each turn has its own ctx, shared by the plugin's handlers of that turn.
    assert_eq!(
        log.iter()
            .filter(|l| !l.ends_with(" freed"))
            .cloned()
            .collect::<Vec<_>>(),
        [
            "input first found False",
            "send with first",
            "input second found False",
            "send with second"
        ],
        "{log:?}"
    );
}

/// The seed's own way to contribute a tool: registered on the agent's
/// tool registry while the turn runs, advertised by patching `tools`.
const WORKBENCH: &str = r#"
from codumentor.agent.tools import Tool
from codumentor.agent.types import ToolResult


class GreetTool(Tool):
    def __init__(self):
        super().__init__(name="greet", description="Greet someone by name.")

    def get_parameters_schema(self) -> dict:
        return {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

    async def execute(self, arguments: dict) -> ToolResult:
        if arguments["name"] == "nobody":
            return ToolResult(tool_call_id=arguments.get("tool_call_id", ""), function_name=self.name,
                              success=False, error="no_such_person", content="Nobody is not a person.")
        return ToolResult(tool_call_id=arguments.get("tool_call_id", ""), function_name=self.name,
                          content=f"Hello, {arguments['name']}! ({bool(arguments.get('tool_call_id'))})")


class Workbench:
    def __init__(self, config=None, **kwargs):
        self._tools = [GreetTool()]

    async def register(self, bus):
        bus.on("onPromptAssemble", self.on_prompt_assemble)

    async def on_prompt_assemble(self, agent, ctx, payload):
        current = payload.get("tools", [])
        known = {t.get("name") for t in current if isinstance(t, dict)}
        added = []
        for tool in self._tools:
            if not agent.tool_registry.get_tool(tool.name):
                agent.tool_registry.register_tool(tool)
            if tool.name not in known:
                added.append(tool.get_function_definition())
        return {"type": "continue", "patch": {"tools": current + added}}
"#;

#[test]
fn tools_an_isolated_codumentor_plugin_registers_while_running_are_called_in_its_worker() {
    let run = |isolate: bool| {
        let env = Env::new();
        env.codumentor(
            "workbench",
            "workbench_pkg:Workbench",
            "",
            &[("workbench_pkg/__init__.py", WORKBENCH)],
        );
        env.config(&["workbench"], if isolate { &["workbench"] } else { &[] });
        assert_eq!(isolated_flag(&env, "workbench"), isolate);
        let report = env.turn(
            "turns:\n  - say: \"Greeting.\"\n    tool_calls:\n      - name: greet\n        args: {name: Ada}\n      - name: greet\n        args: {name: nobody}\n      - name: greet\n        args: {}\n  - say: \"done\"\n",
            "w",
            "hi",
        );
        let observed = observed(&env, &report);
        (env, observed)
    };
    let (_in_env, in_process) = run(false);
    let (_env, isolated) = run(true);
    assert_eq!(in_process, isolated, "{in_process:#}\n{isolated:#}");
    let calls = isolated["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["result"], "Hello, Ada! (True)", "{calls:#?}");
    assert_eq!(
        calls[1]["result"],
        "Error (no_such_person): Nobody is not a person."
    );
    assert_eq!(calls[1]["outcome"], "raised");
    // Validated against the schema it registered, before reaching the worker.
    assert_eq!(calls[2]["outcome"], "invalid_arguments", "{calls:#?}");
    assert!(isolated["model_calls"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "greet"));
}

/// The answers that re-run a tool or add steps, chosen by `mode`.
const TOOL_ANSWERS: &str = r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class ToolAnswers:
    def __init__(self, config=None, **kwargs):
        self.mode = kwargs["mode"]
        self.requeued = 0

    async def register(self, bus):
        bus.on("onToolInvokeEnd", self.end)
        bus.on("onAfterTool", self.after_tool)
        bus.on("onAfterPromptAssemble", self.after_prompt)

    async def end(self, agent, ctx, payload):
        if self.mode == "retry" and payload["args"].get("path") == "missing":
            return {"type": "retry_with", "patched_args": {"path": "sub"}, "backoff_ms": 5}

    async def after_tool(self, agent, ctx, payload):
        if self.mode == "requeue":
            self.requeued += 1
            log(f"after_tool {self.requeued} {payload['result'][:40]!r}")
            return {"type": "requeue_tool"}
        if self.mode == "insert":
            return {"type": "insert_step", "messages": [{"role": "user", "content": "note after tool"}]}

    async def after_prompt(self, agent, ctx, payload):
        if self.mode == "insert" and not any(m.get("content") == "prompt note" for m in payload["messages"]):
            return {"type": "insert_step", "messages": [{"role": "user", "content": "prompt note"}]}
"#;

#[test]
fn isolated_rerun_and_insert_step_answers_have_their_in_process_effects() {
    let run = |isolate: bool| {
        let env = Env::new();
        let work = env.home.path().join("work");
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::write(work.join("sub").join("inner.txt"), "x").unwrap();
        let mut observed_all = Vec::new();
        for mode in ["retry", "requeue", "insert"] {
            env.codumentor(
                "toolans",
                "toolans_pkg:ToolAnswers",
                &format!("args: {{mode: {mode}}}\n"),
                &[("toolans_pkg/__init__.py", TOOL_ANSWERS)],
            );
            env.config(&["toolans"], if isolate { &["toolans"] } else { &[] });
            let report = env.turn_with(
                "turns:\n  - say: \"Listing.\"\n    tool_calls:\n      - name: list_dir\n        args: {path: \"missing\"}\n  - say: \"listed\"\n",
                mode,
                "hi",
                &["--workspace", work.to_str().unwrap()],
            );
            observed_all.push(observed(&env, &report));
        }
        assert_eq!(isolated_flag(&env, "toolans"), isolate);
        (env, observed_all)
    };
    let (in_env, in_process) = run(false);
    let (env, isolated) = run(true);
    for (a, b) in in_process.iter().zip(&isolated) {
        assert_eq!(a, b, "{a:#}\n{b:#}");
    }
    assert_eq!(in_env.log_lines(), env.log_lines());
    // retry_with: the re-run's result replaced the failed one.
    let retried = isolated[0]["tool_calls"][0]["result"].as_str().unwrap();
    assert!(retried.contains("inner.txt"), "{:#}", isolated[0]);
    // requeue_tool: one re-run, never re-run again.
    assert_eq!(
        env.log_lines()
            .iter()
            .filter(|l| l.starts_with("after_tool "))
            .count(),
        2,
        "{:?}",
        env.log_lines()
    );
    // insert_step: both notes reached the second model call.
    let second = isolated[2]["model_calls"][1]["messages"].to_string();
    assert!(
        second.contains("prompt note") && second.contains("note after tool"),
        "{second}"
    );
}
