//! Codumentor backend plugins, unmodified: classes with `async def
//! register(self, bus)`, written the way the seed's authors write them,
//! in `plugin.yaml` + `backend/` directories, loaded through the CLI.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use crate::common::run_bounded;
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(env.home.path().join("plugins")).unwrap();
        env
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

    /// Write `<home>/plugins/<key>/` with `manifest_extra` lines after the
    /// name and dialect, and `files` under `backend/`.
    fn plugin(&self, key: &str, manifest_extra: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.home.path().join("plugins").join(key);
        std::fs::create_dir_all(dir.join("backend")).unwrap();
        std::fs::write(
            dir.join("plugin.yaml"),
            format!("name: {key}\ndialect: codumentor\n{manifest_extra}"),
        )
        .unwrap();
        for (name, text) in files {
            let file = dir.join("backend").join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        dir
    }

    fn config(&self, config: Value) {
        std::fs::write(self.home.path().join("config.json"), config.to_string()).unwrap();
    }

    fn enable(&self, keys: &[&str]) {
        self.config(serde_json::json!({"plugins": {"enabled": keys}}));
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("CODU_LOG", self.log())
            .env("HERMES_HOME", self.home.path().join("no-hermes"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.command(args), Duration::from_secs(60))
    }

    fn list(&self) -> Vec<Value> {
        let out = self.run(&["plugins", "list", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn record<'a>(list: &'a [Value], key: &str) -> &'a Value {
    list.iter()
        .find(|p| p["key"] == key)
        .unwrap_or_else(|| panic!("no plugin '{key}' in {list:#?}"))
}

/// A plugin class as the seed writes them: settings from `**kwargs`, an
/// `async def register(self, bus)` subscribing with priorities, and a
/// line in the shared log so the test sees the load order.
fn logging_plugin(package: &str, class: &str, events: &str) -> String {
    format!(
        r#"
import os
from codumentor.agent.tools import Tool
from codumentor.agent.types import ToolResult


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class {class}:
    meta = {{"name": "{package}"}}

    def __init__(self, config=None, **kwargs):
        assert config is None
        self.label = kwargs.get("label", "{package}")
        self.kwargs = kwargs

    def set_plugin_host(self, host):
        self.host = host

    async def register(self, bus):
        log("register " + self.label + " " + repr(sorted(self.kwargs.items())))
        for event in {events}:
            bus.on(event, self.handle, priority=50)

    async def handle(self, agent, ctx, payload):
        return None
"#
    )
}

#[test]
fn packaging_discovery_args_and_load_order() {
    let env = Env::new();
    // Discovery order is by directory name; priority and dependencies reorder.
    env.plugin(
        "a-late",
        "entry: late_pkg.plugin:LatePlugin\nversion: '2.0'\ndescription: Late\n",
        &[
            ("late_pkg/__init__.py", ""),
            (
                "late_pkg/plugin.py",
                &logging_plugin("a-late", "LatePlugin", r#"["onPromptAssemble"]"#),
            ),
        ],
    );
    env.plugin(
        "b-app",
        "entry: app_pkg.plugin:AppPlugin\ndependencies: [c-base]\npriority: 1\nargs:\n  label: app\n  depth: 3\n",
        &[
            ("app_pkg/__init__.py", ""),
            (
                "app_pkg/plugin.py",
                &logging_plugin(
                    "b-app",
                    "AppPlugin",
                    r#"["onToolInvokeStart", "onAtQuery", "onNoSuchEvent"]"#,
                ),
            ),
        ],
    );
    env.plugin(
        "c-base",
        "entry: base_pkg:BasePlugin\npriority: 50\n",
        &[(
            "base_pkg/__init__.py",
            &logging_plugin("c-base", "BasePlugin", r#"["onAfterLLM"]"#),
        )],
    );
    env.plugin(
        "d-early",
        "entry: early_pkg:EarlyPlugin\npriority: 10\nargs: {label: early}\n",
        &[(
            "early_pkg/__init__.py",
            &logging_plugin("d-early", "EarlyPlugin", "[]"),
        )],
    );
    env.config(serde_json::json!({"plugins": {
        "enabled": ["a-late", "b-app", "c-base", "d-early"],
        "config": {"b-app": {"depth": 7, "extra": "from config"}}
    }}));

    let list = env.list();
    let app = record(&list, "b-app");
    assert_eq!(app["dialect"], "codumentor", "{app:#}");
    assert_eq!(app["status"], "loaded", "{app:#}");
    assert_eq!(app["entry"], "app_pkg.plugin:AppPlugin");
    assert_eq!(app["dependencies"], serde_json::json!(["c-base"]));
    assert_eq!(
        app["hooks"],
        serde_json::json!(["onToolInvokeStart", "onAtQuery", "onNoSuchEvent"])
    );
    let late = record(&list, "a-late");
    assert_eq!(late["version"], "2.0");
    assert_eq!(late["description"], "Late");
    assert_eq!(late["dependencies"], serde_json::json!([]));
    // Load order: priority 10, then 50, then b-app (priority 1, but after
    // its dependency), then the default 100; `plugins list` shows that order.
    assert_eq!(
        env.log_lines(),
        [
            "register early [('label', 'early')]",
            "register c-base []",
            "register app [('depth', 7), ('extra', 'from config'), ('label', 'app')]",
            "register a-late []",
        ]
    );
    let keys: Vec<&str> = list.iter().map(|p| p["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["d-early", "c-base", "b-app", "a-late"]);

    // doctor: the out-of-scope and unknown events never fire; the edges show.
    let out = env.run(&["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("hook onAtQuery: a Codumentor server event a command-line host does not have: it never fires"), "{text}");
    assert!(
        text.contains("hook onNoSuchEvent: not a known Codumentor event: it never fires"),
        "{text}"
    );
    assert!(!text.contains("hook onToolInvokeStart:"), "{text}");
    assert!(text.contains("loads after: c-base"), "{text}");
    assert!(text.contains("codumentor modules: compat"), "{text}");
}

#[test]
fn every_way_a_codumentor_plugin_fails_to_load_is_named() {
    let env = Env::new();
    let ok = "class Ok:\n    def __init__(self, config=None, **kw):\n        pass\n    async def register(self, bus):\n        pass\n";
    env.plugin(
        "fine",
        "entry: fine_pkg:Ok\n",
        &[("fine_pkg/__init__.py", ok)],
    );
    env.plugin(
        "orphan",
        "entry: orphan_pkg:Ok\ndependencies: [missing-one]\n",
        &[("orphan_pkg/__init__.py", ok)],
    );
    env.plugin(
        "cyc-a",
        "entry: cyca:Ok\ndependencies: [cyc-b]\n",
        &[("cyca/__init__.py", ok)],
    );
    env.plugin(
        "cyc-b",
        "entry: cycb:Ok\ndependencies: [cyc-a]\n",
        &[("cycb/__init__.py", ok)],
    );
    env.plugin(
        "noclass",
        "entry: noclass_pkg.mod:Nope\n",
        &[("noclass_pkg/__init__.py", ""), ("noclass_pkg/mod.py", ok)],
    );
    env.plugin(
        "importfail",
        "entry: importfail_pkg:Ok\n",
        &[(
            "importfail_pkg/__init__.py",
            "import no_such_module_anywhere\n",
        )],
    );
    env.plugin(
        "raiser",
        "entry: raiser_pkg:Raiser\n",
        &[(
            "raiser_pkg/__init__.py",
            "class Raiser:\n    def __init__(self, config=None, **kw):\n        pass\n    async def register(self, bus):\n        bus.on('onPromptAssemble', self.h)\n        raise RuntimeError('database unreachable')\n    async def h(self, agent, ctx, payload):\n        return None\n",
        )],
    );
    env.plugin(
        "after-raiser",
        "entry: after_pkg:Ok\ndependencies: [raiser]\n",
        &[("after_pkg/__init__.py", ok)],
    );
    env.plugin(
        "after-off",
        "entry: afteroff_pkg:Ok\ndependencies: [paused]\n",
        &[("afteroff_pkg/__init__.py", ok)],
    );
    env.plugin(
        "paused",
        "entry: off_pkg:Ok\n",
        &[("off_pkg/__init__.py", ok)],
    );
    // Same top-level package as `fine`: refused, naming the owner.
    env.plugin(
        "twin",
        "entry: fine_pkg:Ok\n",
        &[("fine_pkg/__init__.py", ok)],
    );
    env.plugin(
        "late-sub",
        "entry: latesub_pkg:Late\n",
        &[(
            "latesub_pkg/__init__.py",
            "class Late:\n    def __init__(self, config=None, **kw):\n        pass\n    def register(self, bus):   # a sync register is accepted\n        self.bus = bus\n    def set_plugin_host(self, host):\n        pass\n",
        )],
    );
    // A directory without backend/ and a manifest without entry.
    let nobackend = env.home.path().join("plugins").join("nobackend");
    std::fs::create_dir_all(&nobackend).unwrap();
    std::fs::write(
        nobackend.join("plugin.yaml"),
        "name: nobackend\ndialect: codumentor\nentry: x:Y\n",
    )
    .unwrap();
    env.plugin("noentry", "", &[]);
    env.plugin("badentry", "entry: just_a_module\n", &[]);
    let weird = env.home.path().join("plugins").join("weird");
    std::fs::create_dir_all(&weird).unwrap();
    std::fs::write(
        weird.join("plugin.yaml"),
        "name: weird\ndialect: felixish\n",
    )
    .unwrap();
    env.config(serde_json::json!({"plugins": {
        "enabled": ["fine", "orphan", "cyc-a", "cyc-b", "noclass", "importfail", "raiser",
                    "after-raiser", "after-off", "twin", "late-sub", "nobackend", "noentry",
                    "badentry", "weird"],
        "disabled": ["paused"]
    }}));

    let list = env.list();
    let error = |key: &str| {
        let r = record(&list, key);
        (
            r["status"].as_str().unwrap().to_string(),
            r["error"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(error("fine"), ("loaded".into(), String::new()));
    assert_eq!(error("late-sub"), ("loaded".into(), String::new()));
    assert_eq!(
        error("orphan"),
        (
            "failed".into(),
            "dependency 'missing-one' is not loaded (no plugin with that key was found)".into()
        )
    );
    assert_eq!(error("cyc-a").1, "dependency cycle: cyc-a → cyc-b → cyc-a");
    assert_eq!(error("cyc-b").1, "dependency cycle: cyc-b → cyc-a → cyc-b");
    assert_eq!(
        error("noclass").1,
        "no class 'Nope' in module 'noclass_pkg.mod'"
    );
    assert_eq!(
        error("importfail").1,
        "ModuleNotFoundError: No module named 'no_such_module_anywhere'"
    );
    let raiser = record(&list, "raiser");
    assert_eq!(raiser["error"], "RuntimeError: database unreachable");
    assert_eq!(
        raiser["hooks"],
        serde_json::json!([]),
        "rolled back: {raiser:#}"
    );
    assert!(raiser["failure"]["location"]
        .as_str()
        .unwrap()
        .contains("raiser_pkg/__init__.py:6"));
    assert_eq!(
        error("after-raiser").1,
        "dependency 'raiser' is not loaded (it failed: RuntimeError: database unreachable)"
    );
    assert_eq!(
        error("after-off").1,
        "dependency 'paused' is not loaded (disabled in config)"
    );
    assert_eq!(
        error("twin").1,
        "package 'fine_pkg' is already provided by plugin 'fine'; two Codumentor plugins cannot share a top-level package name"
    );
    assert!(
        error("nobackend").1.starts_with("no backend/ directory"),
        "{:?}",
        error("nobackend")
    );
    assert!(
        error("noentry")
            .1
            .contains("field 'entry' is required for dialect: codumentor"),
        "{:?}",
        error("noentry")
    );
    assert!(
        error("badentry")
            .1
            .contains("field 'entry' must be \"<module>:<Class>\""),
        "{:?}",
        error("badentry")
    );
    assert!(
        error("weird")
            .1
            .contains("field 'dialect' names an unknown plugin API 'felixish'"),
        "{:?}",
        error("weird")
    );
    assert_eq!(record(&list, "nobackend")["dialect"], "codumentor");

    // doctor exits 1 and names the failures.
    let out = env.run(&["plugins", "doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// Plugin-to-plugin events through `await bus.emit(...)`: the seed's
/// seed-a-registry-and-patch-it-back pattern, and every chain convention.
#[test]
fn emit_chains_every_return_convention_and_fails_open() {
    let env = Env::new();
    let contributor = r#"
import asyncio

class Contributor:
    def __init__(self, config=None, **kwargs):
        self.mode = kwargs["mode"]

    async def register(self, bus):
        bus.on("onRegisterScmAdapters", self.contribute, priority=kwargs_priority(self.mode))

    async def contribute(self, agent, ctx, payload):
        await asyncio.sleep(0)
        ctx.setdefault("seen", []).append(self.mode)
        adapters = dict(payload.get("adapters", {}))
        if self.mode == "patch":
            adapters["svn"] = "SvnAdapter"
            return {"type": "continue", "patch": {"adapters": adapters}}
        if self.mode == "raise":
            raise ValueError("adapter registry offline")
        if self.mode == "bad-patch":
            return {"type": "continue", "patch": ["not", "a", "dict"]}
        if self.mode == "veto":          # honoured only on onToolInvokeStart: ignored here
            return {"type": "veto_tool", "reason": "nope"}
        if self.mode == "string":        # ignored, as the seed says
            return "what?"
        if self.mode == "retry":
            return {"type": "retry", "delay_ms": 5}
        if self.mode == "working-dict":  # a dict without "type": whole replacement
            return {"adapters": {**adapters, "hg": "HgAdapter"}, "replaced": True}
        if self.mode == "defer":
            return {"type": "defer"}
        if self.mode == "after-defer":
            return {"type": "replace", "value": {"adapters": {}, "clobbered": True}}
        return None


def kwargs_priority(mode):
    return {"patch": 10, "raise": 20, "bad-patch": 30, "veto": 40, "string": 50,
            "retry": 60, "working-dict": 70, "defer": 80, "after-defer": 90}[mode]
"#;
    let modes = [
        "patch",
        "raise",
        "bad-patch",
        "veto",
        "string",
        "retry",
        "working-dict",
        "defer",
        "after-defer",
    ];
    for mode in modes {
        let package = format!("contrib_{}", mode.replace('-', "_"));
        env.plugin(
            &format!("contrib-{mode}"),
            &format!("entry: {package}:Contributor\nargs: {{mode: {mode}}}\n"),
            &[(&format!("{package}/__init__.py"), contributor)],
        );
    }
    let emitter = r#"
import json, os

class BranchSwitching:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        ctx = {}
        payload = await bus.emit("onRegisterScmAdapters", {"adapters": {"git": "GitScmAdapter"}}, ctx=ctx)
        with open(os.environ["CODU_LOG"], "a") as f:
            f.write(json.dumps({"payload": payload, "seen": ctx.get("seen")}, sort_keys=True) + "\n")
"#;
    let deps: Vec<String> = modes.iter().map(|m| format!("contrib-{m}")).collect();
    env.plugin(
        "branch_switching",
        &format!(
            "entry: branch_pkg:BranchSwitching\ndependencies: [{}]\n",
            deps.join(", ")
        ),
        &[("branch_pkg/__init__.py", emitter)],
    );
    let mut enabled: Vec<&str> = deps.iter().map(String::as_str).collect();
    enabled.push("branch_switching");
    env.enable(&enabled);

    let out = env.run(&["plugins", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        record(&list, "branch_switching")["status"],
        "loaded",
        "{list:#?}"
    );
    let lines = env.log_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let got: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(
        got["payload"],
        serde_json::json!({"adapters": {"git": "GitScmAdapter", "svn": "SvnAdapter", "hg": "HgAdapter"}, "replaced": true}),
        "patch merged, the raiser and the bad patch failed open, the veto and the string ignored, the working dict replaced, defer stopped the chain"
    );
    assert_eq!(
        got["seen"],
        serde_json::json!([
            "patch",
            "raise",
            "bad-patch",
            "veto",
            "string",
            "retry",
            "working-dict",
            "defer"
        ]),
        "one ctx dict shared by the chain; nothing after defer ran"
    );
    let err = stderr(&out);
    assert!(
        err.contains("ValueError: adapter registry offline"),
        "{err}"
    );
    assert!(err.contains("'patch' must be a dict"), "{err}");
}

#[test]
fn plugins_install_accepts_a_codumentor_directory() {
    let env = Env::new();
    let src = tempfile::tempdir().unwrap();
    let dir = src.path().join("my-codu");
    std::fs::create_dir_all(dir.join("backend").join("codu_pkg")).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        "name: my-codu\ndialect: codumentor\nentry: codu_pkg:P\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("backend/codu_pkg/__init__.py"),
        "class P:\n    def __init__(self, config=None, **kw):\n        pass\n    async def register(self, bus):\n        bus.on('onPromptAssemble', self.h, priority=10)\n    async def h(self, agent, ctx, payload):\n        return None\n",
    )
    .unwrap();
    let out = env.run(&["plugins", "install", dir.to_str().unwrap(), "--enable"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(env
        .home
        .path()
        .join("plugins/my-codu/backend/codu_pkg/__init__.py")
        .is_file());
    let list = env.list();
    let r = record(&list, "my-codu");
    assert_eq!(r["status"], "loaded", "{r:#}");
    assert_eq!(r["hooks"], serde_json::json!(["onPromptAssemble"]));

    // Without backend/: refused, nothing installed.
    let bare = src.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(
        bare.join("plugin.yaml"),
        "name: bare\ndialect: codumentor\nentry: x:Y\n",
    )
    .unwrap();
    let out = env.run(&["plugins", "install", bare.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no backend/ directory"),
        "{}",
        stderr(&out)
    );
    assert!(!env.home.path().join("plugins/bare").exists());
    let _ = Path::new("");
}

impl Env {
    /// `plughost run --json` with a scripted model; the report.
    fn turn(&self, script: &str, extra: &[&str], message: &str) -> (Output, Value) {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, script).unwrap();
        let mut args = vec![
            "run",
            "--json",
            "--script",
            path.to_str().unwrap(),
            "--model",
            "scripted",
        ];
        args.extend_from_slice(extra);
        args.push(message);
        let out = self.run(&args);
        let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out, report)
    }

    fn transcript(&self, session: &str) -> Vec<Value> {
        std::fs::read_to_string(
            self.home
                .path()
                .join("sessions")
                .join(format!("{session}.jsonl")),
        )
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
    }
}

/// The seed's own tool plugin (register in onPromptAssemble, advertise by
/// patching `tools`), a context note, routing, a guard, answer revision
/// and UI events: every effect of a normal turn.
const WORKBENCH: &str = r#"
import os
from codumentor.agent.tools import Tool
from codumentor.agent.types import ToolResult
from codumentor.agent.context_notes import add_context_note, content_freshness
from codumentor.plugins.utils import should_register_tools_for_agent


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class GreetTool(Tool):
    def __init__(self):
        super().__init__(name="greet", description="Greet someone by name.")

    def get_parameters_schema(self) -> dict:
        return {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

    async def execute(self, arguments: dict) -> ToolResult:
        log("greet tool_call_id=" + arguments.get("tool_call_id", ""))
        if arguments["name"] == "nobody":
            return ToolResult(tool_call_id=arguments.get("tool_call_id", ""), function_name=self.name,
                              success=False, error="no_such_person", content="Nobody is not a person.")
        return ToolResult(tool_call_id=arguments.get("tool_call_id", ""), function_name=self.name,
                          content=f"Hello, {arguments['name']}!")


class Workbench:
    def __init__(self, config=None, **kwargs):
        self._tools = [GreetTool()]
        self.target_agents = kwargs.get("target_agents", "all")

    async def register(self, bus):
        bus.on("onInputReceived", self.on_input, priority=10)
        bus.on("onContextReady", self.on_context)
        bus.on("onPromptAssemble", self.on_prompt_assemble, priority=50)
        bus.on("onAfterPromptAssemble", self.on_after_prompt)
        bus.on("onLLMCallStart", self.on_call_start)
        bus.on("onLLMCallEnd", self.observe("onLLMCallEnd"))
        bus.on("onAfterLLM", self.observe("onAfterLLM"))
        bus.on("onToolInvokeStart", self.on_tool_start)
        bus.on("onToolExecuting", self.observe("onToolExecuting"))
        bus.on("onToolInvokeEnd", self.on_tool_end)
        bus.on("onAfterTool", self.observe("onAfterTool"))
        bus.on("onBeforeSendResponse", self.on_before_send)
        bus.on("onResponsePersist", self.on_persist)
        bus.on("onSessionEvict", self.on_evict)
        bus.on("onServerReady", self.on_ready)

    def observe(self, name):
        async def handler(agent, ctx, payload):
            keys = ",".join(sorted(payload))
            log(f"{name} step={ctx.get('step')} keys={keys} turn={ctx['turn_id'] == ctx.get('first_turn_id')}")
            if name == "onToolExecuting":
                log(f"executing {payload['tool']} {payload['tool_call_id']}")
            if name == "onAfterLLM":
                log(f"after_llm sent {[m['role'] for m in payload['messages']][:2]}")
            return None
        handler.__qualname__ = "Workbench." + name
        return handler

    async def on_ready(self, agent, ctx, payload):
        log(f"ready agent={agent} ctx={ctx} payload={payload}")

    async def on_evict(self, agent, ctx, payload):
        log(f"evict {payload['session_id']} agent={agent} ctx={ctx}")

    async def on_input(self, agent, ctx, payload):
        ctx["first_turn_id"] = ctx["turn_id"]
        return {"type": "continue", "patch": {"raw": payload["raw"].replace("please", "kindly")}}

    async def on_context(self, agent, ctx, payload):
        log(f"context {payload['session_id']} {payload['user_id']} {[m['content'] for m in payload['messages']]}")
        return {"messages": []}  # a working dict: replaces the payload, feeds nothing back

    async def on_prompt_assemble(self, agent, ctx, payload):
        if not should_register_tools_for_agent(agent, self.target_agents):
            return None
        current = payload.get("tools", [])
        known = {t.get("name") for t in current if isinstance(t, dict)}
        added = []
        for tool in self._tools:
            if not agent.tool_registry.get_tool(tool.name):
                agent.tool_registry.register_tool(tool)
            if tool.name not in known:
                added.append(tool.get_function_definition())
        messages = payload.get("messages", [])
        note = add_context_note(messages, marker="[Workbench]", render=lambda: "[Workbench] be brief", scope="prefix")
        patch = {"tools": current + added}
        if note is not None:
            patch["messages"] = note
        return {"type": "continue", "patch": patch}

    async def on_after_prompt(self, agent, ctx, payload):
        log("after_prompt " + ",".join(m["role"] for m in payload["messages"]))
        return None

    async def on_call_start(self, agent, ctx, payload):
        return {"type": "param_patch", "model": "routed-model", "params": {"temperature": 0.2}}

    async def on_tool_start(self, agent, ctx, payload):
        if payload["tool"] == "exec":
            return {"type": "veto_tool", "reason": "no shell here"}
        return None

    async def on_tool_end(self, agent, ctx, payload):
        if payload["tool"] == "greet":
            return {"type": "continue", "patch": {"result": payload["result"] + " (checked)"}}
        return None

    async def on_before_send(self, agent, ctx, payload):
        await ctx["ui_event_emitter"]("plugin.workbench.completed", {"status": "success"}, None)
        return {"type": "replace", "value": {"assistant_text": payload["assistant_text"].upper()}}

    async def on_persist(self, agent, ctx, payload):
        log("persist " + payload["assistant_text"])
"#;

const WORKBENCH_SCRIPT: &str = r#"
turns:
  - say: "Working."
    tool_calls:
      - name: greet
        args: {name: "Ada"}
      - name: greet
        args: {name: "nobody"}
      - name: exec
        args: {command: "echo hi"}
  - say: "done"
"#;

#[test]
fn a_normal_turn_shows_every_effect() {
    let env = Env::new();
    env.plugin(
        "workbench",
        "entry: workbench_pkg:Workbench\n",
        &[("workbench_pkg/__init__.py", WORKBENCH)],
    );
    env.enable(&["workbench"]);
    let (out, report) = env.turn(WORKBENCH_SCRIPT, &["--session", "w1"], "please greet");
    assert!(out.status.success(), "{}\n{report:#}", stderr(&out));
    assert_eq!(report["ended_by"], "answer", "{report:#}");
    assert_eq!(report["reply"], "DONE", "{report:#}");
    assert_eq!(report["hook_errors"], serde_json::json!([]), "{report:#}");
    assert_eq!(
        report["ui_events"],
        serde_json::json!([{"type": "plugin.workbench.completed", "data": {"status": "success"}}])
    );
    // Input rewritten and stored; the note reached the model, never the transcript.
    let calls = report["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report:#}");
    let first = &calls[0];
    assert_eq!(first["model"], "routed-model");
    assert_eq!(first["params"], serde_json::json!({"temperature": 0.2}));
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "greet"),
        "{first:#}"
    );
    let msgs = first["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(msgs[1]["content"], "[Workbench] be brief", "{msgs:#?}");
    assert!(
        msgs[1].get("metadata").is_none(),
        "the tag never reaches the model"
    );
    assert_eq!(msgs.last().unwrap()["content"], "kindly greet");
    // The note is carried, not re-added, in the second call.
    let second = calls[1]["messages"].as_array().unwrap();
    assert_eq!(
        second
            .iter()
            .filter(|m| m["content"] == "[Workbench] be brief")
            .count(),
        1
    );
    // Tool results: runtime tool with tool_call_id, ToolResult failure, veto, rewrite.
    let tools = report["tool_calls"].as_array().unwrap();
    assert_eq!(tools[0]["result"], "Hello, Ada! (checked)", "{tools:#?}");
    assert_eq!(tools[0]["outcome"], "ok");
    assert_eq!(
        tools[1]["result"],
        "Error (no_such_person): Nobody is not a person. (checked)"
    );
    assert_eq!(
        tools[1]["outcome"], "raised",
        "a failed ToolResult is a failed call"
    );
    assert_eq!(tools[2]["result"], "[blocked: no shell here]");
    assert_eq!(tools[2]["outcome"], "blocked");
    // The transcript: the rewritten input, the revised answer, no note.
    let transcript = env.transcript("w1");
    assert_eq!(transcript[0]["content"], "kindly greet");
    assert_eq!(transcript.last().unwrap()["content"], "DONE");
    assert!(!transcript
        .iter()
        .any(|m| m["content"] == "[Workbench] be brief"));
    let log = env.log_lines();
    let has = |p: &str| log.iter().any(|l| l.starts_with(p));
    assert!(has("ready agent=None ctx={} payload={}"), "{log:#?}");
    assert!(has("context w1 user ['kindly greet']"), "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("greet tool_call_id=") && l.len() > "greet tool_call_id=".len()),
        "{log:#?}"
    );
    assert!(has("persist DONE"), "{log:#?}");
    assert!(has("evict w1 agent=None ctx={}"), "{log:#?}");
    assert!(
        has("onAfterLLM step=1 keys=content_chunks,messages,tool_calls turn=True"),
        "{log:#?}"
    );
    assert!(
        has("onLLMCallEnd step=1 keys=content_chunks,tool_calls"),
        "{log:#?}"
    );
    // The messages the call was sent, system prompt first.
    assert!(has("after_llm sent ['system', 'user']"), "{log:#?}");
    assert!(
        has("onAfterTool step=1 keys=args,messages,ms,result,tool"),
        "{log:#?}"
    );
    assert!(has("executing greet "), "{log:#?}");
}

/// Handlers for the turn endings and the failure paths, chosen by `mode`.
const CONTROL: &str = r#"
import asyncio, os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Control:
    def __init__(self, config=None, **kwargs):
        self.mode = kwargs["mode"]

    async def register(self, bus):
        bus.on("onAfterInput", self.after_input)
        bus.on("onAfterLLM", self.after_llm)
        bus.on("onToolInvokeStart", self.veto, priority=10)
        bus.on("onToolInvokeStart", self.abort, priority=20)
        bus.on("onToolInvokeStart", self.veto_again, priority=30)
        bus.on("onBeforeSendResponse", self.before_send)
        bus.on("onTurnAborted", self.aborted)
        bus.on("onPromptAssemble", self.raiser, priority=1)
        bus.on("onPromptAssemble", self.hanger, priority=2)
        bus.on("onPromptAssemble", self.wrong_shape, priority=3)
        bus.on("onPromptAssemble", self.defer, priority=4)
        bus.on("onPromptAssemble", self.after_defer, priority=5)

    async def after_input(self, agent, ctx, payload):
        if self.mode == "input":
            return {"type": "short_circuit", "assistant_text": "answered early"}

    async def after_llm(self, agent, ctx, payload):
        if self.mode == "llm":
            log(f"after_llm saw {payload['tool_calls'][0]['name']}")
            return {"type": "short_circuit", "assistant_text": "cut short"}

    async def veto(self, agent, ctx, payload):
        if self.mode == "abort":
            return {"type": "veto_tool", "reason": "first veto"}

    async def abort(self, agent, ctx, payload):
        if self.mode == "abort":
            return {"type": "abort_turn", "reason": "budget exhausted", "assistant_text": "Stopping here."}

    async def veto_again(self, agent, ctx, payload):
        if self.mode == "abort":
            log("later handler still ran")
            return {"type": "veto_tool", "reason": "second veto"}

    async def before_send(self, agent, ctx, payload):
        log("before_send " + payload["assistant_text"])
        return {"type": "continue", "patch": {"assistant_text": payload["assistant_text"] + "!"}}

    async def aborted(self, agent, ctx, payload):
        log(f"aborted {payload['reason']} / {payload['assistant_text']}")

    async def raiser(self, agent, ctx, payload):
        if self.mode == "faults":
            raise KeyError("missing index")

    async def hanger(self, agent, ctx, payload):
        if self.mode == "faults":
            await asyncio.sleep(30)

    async def wrong_shape(self, agent, ctx, payload):
        if self.mode == "faults":
            return {"type": "continue", "patch": "not a dict"}

    async def defer(self, agent, ctx, payload):
        if self.mode == "faults":
            return {"type": "defer"}

    async def after_defer(self, agent, ctx, payload):
        if self.mode == "faults":
            log("after defer ran")
"#;

const ONE_TOOL: &str = r#"
turns:
  - say: "Listing."
    tool_calls:
      - name: list_dir
        args: {path: "."}
  - say: "listed"
"#;

fn control(mode: &str) -> Env {
    let env = Env::new();
    env.plugin(
        "control",
        &format!("entry: control_pkg:Control\nargs: {{mode: {mode}}}\n"),
        &[("control_pkg/__init__.py", CONTROL)],
    );
    env.enable(&["control"]);
    env
}

#[test]
fn short_circuit_from_after_input_makes_no_model_call_and_runs_the_response_hooks() {
    let env = control("input");
    let (out, report) = env.turn(ONE_TOOL, &["--session", "c1"], "hi");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report["ended_by"], "short_circuit", "{report:#}");
    assert_eq!(report["model_calls"], serde_json::json!([]));
    assert_eq!(report["reply"], "answered early!");
    assert_eq!(
        env.transcript("c1").last().unwrap()["content"],
        "answered early!"
    );
    assert!(env
        .log_lines()
        .contains(&"before_send answered early".to_string()));
}

#[test]
fn short_circuit_from_after_llm_discards_the_reply_and_its_tool_calls() {
    let env = control("llm");
    let (out, report) = env.turn(ONE_TOOL, &["--session", "c2"], "hi");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report["ended_by"], "short_circuit", "{report:#}");
    assert_eq!(report["reply"], "cut short!");
    assert_eq!(report["model_calls"].as_array().unwrap().len(), 1);
    assert_eq!(
        report["tool_calls"],
        serde_json::json!([]),
        "its tool calls never ran"
    );
    let transcript = env.transcript("c2");
    assert!(
        !transcript.iter().any(|m| m.get("tool_calls").is_some()),
        "{transcript:#?}"
    );
    assert!(env
        .log_lines()
        .contains(&"after_llm saw list_dir".to_string()));
}

#[test]
fn abort_turn_outranks_a_veto_and_completes_the_turn() {
    let env = control("abort");
    let (out, report) = env.turn(ONE_TOOL, &["--session", "c3"], "hi");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(report["completed"], true, "{report:#}");
    assert_eq!(report["ended_by"], "aborted");
    assert_eq!(report["aborted"], "budget exhausted");
    assert_eq!(
        report["reply"], "Stopping here.",
        "no response hooks on an abort"
    );
    assert_eq!(report["model_calls"].as_array().unwrap().len(), 1);
    assert_eq!(
        report["tool_calls"][0]["result"],
        "[blocked: budget exhausted]"
    );
    assert_eq!(report["tool_calls"][0]["outcome"], "blocked");
    let log = env.log_lines();
    assert!(
        log.contains(&"later handler still ran".to_string()),
        "{log:?}"
    );
    assert!(
        log.contains(&"aborted budget exhausted / Stopping here.".to_string()),
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.starts_with("before_send")), "{log:?}");
    assert_eq!(
        env.transcript("c3").last().unwrap()["content"],
        "Stopping here."
    );
}

#[test]
fn raising_hanging_and_wrong_shape_handlers_fail_open_and_are_reported() {
    let env = control("faults");
    let (out, report) = env.turn(
        ONE_TOOL,
        &["--session", "c4", "--hook-timeout", "0.5"],
        "hi",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report["completed"], true, "{report:#}");
    assert_eq!(report["ended_by"], "answer");
    let errors = report["hook_errors"].as_array().unwrap();
    let of = |handler: &str| -> Vec<&Value> {
        errors
            .iter()
            .filter(|e| e["handler"] == format!("control_pkg.Control.{handler}"))
            .collect()
    };
    // Two iterations: each failing handler is reported per call.
    let raised = of("raiser");
    assert_eq!(raised.len(), 2, "{errors:#?}");
    assert_eq!(raised[0]["plugin"], "control");
    assert_eq!(raised[0]["dialect"], "codumentor");
    assert_eq!(raised[0]["event"], "onPromptAssemble");
    assert_eq!(raised[0]["error"], "KeyError: 'missing index'");
    let hung = of("hanger");
    assert_eq!(hung.len(), 2, "{errors:#?}");
    assert_eq!(hung[0]["error"], "timed out after 0.5 s and was skipped");
    let wrong = of("wrong_shape");
    assert_eq!(wrong.len(), 2, "{errors:#?}");
    assert!(
        wrong[0]["error"]
            .as_str()
            .unwrap()
            .contains("'patch' must be a dict"),
        "{wrong:#?}"
    );
    assert!(
        !env.log_lines().contains(&"after defer ran".to_string()),
        "defer stops the event's chain"
    );
    assert_eq!(report["reply"], "listed!");
}

#[test]
fn llm_retry_retries_a_failed_call_once_then_on_error_fires() {
    let env = Env::new();
    env.plugin(
        "recovery",
        "entry: recovery_pkg:Recovery\n",
        &[(
            "recovery_pkg/__init__.py",
            r#"
import os

def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")

class Recovery:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onLLMError", self.on_llm_error)
        bus.on("onError", self.on_error)
        bus.on("onBeforeSendResponse", self.on_send)

    async def on_llm_error(self, agent, ctx, payload):
        log(f"llm_error model={payload['model']} keys={','.join(sorted(payload))}")
        log(f"llm_error sent {[(m['role'], m['content']) for m in payload['messages']][1:]}")
        return {"type": "llm_retry"}

    async def on_error(self, agent, ctx, payload):
        log(f"on_error where={payload['context']['where']} session={payload['context']['session_id']} has_text={'model call failed' in payload['error']}")

    async def on_send(self, agent, ctx, payload):
        log("send")
"#,
        )],
    );
    env.enable(&["recovery"]);
    // Nothing listens on this loopback port: every provider call fails.
    let mut cmd = env.command(&[
        "run",
        "--json",
        "--model",
        "openai:test-model",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--session",
        "r1",
        "hi",
    ]);
    cmd.env("OPENAI_API_KEY", "test");
    let out = run_bounded(cmd, Duration::from_secs(60));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["completed"], false, "{report:#}");
    assert_eq!(report["ended_by"], "error");
    let log = env.log_lines();
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with(
                "llm_error model=openai:test-model keys=error,messages,model,params,tools"
            ))
            .count(),
        2,
        "one retry, then the error propagates: {log:#?}"
    );
    // The failed call's messages, after the system prompt: the user's.
    assert!(
        log.contains(&"llm_error sent [('user', 'hi')]".to_string()),
        "{log:#?}"
    );
    assert!(
        log.contains(&"on_error where=agent_loop session=r1 has_text=True".to_string()),
        "{log:#?}"
    );
    assert!(
        !log.contains(&"send".to_string()),
        "no response hooks on a failed turn"
    );
}

#[test]
fn flowly_and_codumentor_plugins_share_one_turn_in_order() {
    let env = Env::new();
    common::write_plugin(
        &env.home.path().join("plugins"),
        "flowly-side",
        "name: flowly-side\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_hook('pre_llm_call', lambda c: 'flowly context')\n    ctx.register_hook('transform_tool_result', lambda c: c.result + ' [flowly]')\n",
        )],
    );
    env.plugin(
        "codu-side",
        "entry: codu_side:Side\n",
        &[(
            "codu_side/__init__.py",
            r#"
import os

class Side:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onAfterPromptAssemble", self.final)
        bus.on("onToolInvokeEnd", self.tool_end)

    async def final(self, agent, ctx, payload):
        last = [m for m in payload["messages"] if m["role"] == "user"][-1]["content"]
        with open(os.environ["CODU_LOG"], "a") as f:
            f.write("final sees flowly: " + str("flowly context" in last) + "\n")

    async def tool_end(self, agent, ctx, payload):
        return {"type": "continue", "patch": {"result": payload["result"] + " [codumentor]"}}
"#,
        )],
    );
    env.enable(&["flowly-side", "codu-side"]);
    let (out, report) = env.turn(ONE_TOOL, &["--session", "x1"], "hi");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report["hook_errors"], serde_json::json!([]), "{report:#}");
    assert!(env
        .log_lines()
        .contains(&"final sees flowly: True".to_string()));
    let result = report["tool_calls"][0]["result"].as_str().unwrap();
    assert!(
        result.ends_with("[flowly] [codumentor]") || result.ends_with("[codumentor] [flowly]"),
        "{result}"
    );
    let list = env.list();
    assert_eq!(record(&list, "flowly-side")["dialect"], "flowly");
    assert_eq!(record(&list, "codu-side")["dialect"], "codumentor");
}

/// Handlers for the tool answers (`retry_with`, `requeue_tool`,
/// `insert_step`, an `args` patch), chosen by `mode`.
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
        bus.on("onToolInvokeStart", self.start)
        bus.on("onToolInvokeEnd", self.end)
        bus.on("onAfterTool", self.after_tool)
        bus.on("onAfterPromptAssemble", self.after_prompt)

    async def start(self, agent, ctx, payload):
        log(f"start {payload['args']}")
        if self.mode == "args":
            return {"type": "continue", "patch": {"args": {"path": "sub"}}}
        if self.mode == "bad_args":
            return {"type": "continue", "patch": {"args": "sub"}}

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

fn tool_answers(mode: &str) -> Env {
    let env = Env::new();
    env.plugin(
        "toolans",
        &format!("entry: toolans_pkg:ToolAnswers\nargs: {{mode: {mode}}}\n"),
        &[("toolans_pkg/__init__.py", TOOL_ANSWERS)],
    );
    env.enable(&["toolans"]);
    env
}

/// A workspace with `sub/inner.txt`, the turn running in it.
fn tool_turn(env: &Env, path: &str, session: &str) -> (Output, Value) {
    let work = env.home.path().join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::write(work.join("sub").join("inner.txt"), "x").unwrap();
    let script = format!(
        "turns:\n  - say: \"Listing.\"\n    tool_calls:\n      - name: list_dir\n        args: {{path: \"{path}\"}}\n  - say: \"listed\"\n"
    );
    let work = work.to_str().unwrap();
    env.turn(&script, &["--session", session, "--workspace", work], "hi")
}

fn count(log: &[String], prefix: &str) -> usize {
    log.iter().filter(|l| l.starts_with(prefix)).count()
}

#[test]
fn an_args_patch_from_tool_invoke_start_is_what_the_tool_runs_with() {
    let env = tool_answers("args");
    let (out, report) = tool_turn(&env, ".", "t1");
    assert!(out.status.success(), "{}", stderr(&out));
    let result = report["tool_calls"][0]["result"].as_str().unwrap();
    assert!(result.contains("inner.txt"), "{report:#}");

    let env = tool_answers("bad_args");
    let (out, report) = tool_turn(&env, ".", "t2");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        report["tool_calls"][0]["outcome"], "invalid_arguments",
        "{report:#}"
    );
}

#[test]
fn retry_with_reruns_the_tool_once_with_the_patched_args() {
    let env = tool_answers("retry");
    let (out, report) = tool_turn(&env, "missing", "t3");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report["tool_calls"].as_array().unwrap().len(), 1);
    let result = report["tool_calls"][0]["result"].as_str().unwrap();
    assert!(
        result.contains("inner.txt"),
        "the new result replaces the old: {report:#}"
    );
    let log = env.log_lines();
    assert_eq!(count(&log, "start "), 2, "{log:?}");
    assert!(log[1].contains("'sub'"), "{log:?}");
    let tool_messages: Vec<_> = env
        .transcript("t3")
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 1, "{tool_messages:#?}");
    assert_eq!(tool_messages[0]["content"], result);
}

#[test]
fn requeue_tool_reruns_the_completed_tool_once() {
    let env = tool_answers("requeue");
    let (out, report) = tool_turn(&env, "sub", "t4");
    assert!(out.status.success(), "{}", stderr(&out));
    let log = env.log_lines();
    assert_eq!(
        count(&log, "start "),
        2,
        "re-run once, never again: {log:?}"
    );
    assert_eq!(report["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(
        count(&log, "after_tool "),
        2,
        "the re-run's hooks ran: {log:?}"
    );
    assert_eq!(report["completed"], true, "{report:#}");
}

#[test]
fn insert_step_reaches_the_model_and_is_carried_but_never_stored() {
    let env = tool_answers("insert");
    let (out, report) = tool_turn(&env, "sub", "t5");
    assert!(out.status.success(), "{}", stderr(&out));
    let calls = report["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report:#}");
    let contents = |i: usize| -> Vec<String> {
        calls[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let first = contents(0);
    assert_eq!(
        first.last().unwrap(),
        "prompt note",
        "this call sees it: {first:?}"
    );
    let second = contents(1);
    assert_eq!(
        second.iter().filter(|c| *c == "prompt note").count(),
        1,
        "carried once: {second:?}"
    );
    assert_eq!(second.last().unwrap(), "note after tool", "{second:?}");
    let roles: Vec<_> = calls[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    let tool_at = roles.iter().position(|r| r == "tool").unwrap();
    assert!(
        tool_at < roles.len() - 1,
        "after the tool result: {roles:?}"
    );
    let stored = env.transcript("t5");
    assert!(
        !stored
            .iter()
            .any(|m| m["content"] == "note after tool" || m["content"] == "prompt note"),
        "{stored:#?}"
    );
}

/// A loopback OpenAI-compatible stub serving `responses` (SSE bodies) in
/// order, one per connection.
fn stub(responses: Vec<String>) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for response in responses {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream.write_all(response.as_bytes());
        }
    });
    url
}

fn sse(events: &[Value]) -> String {
    let mut body = String::new();
    for e in events {
        body.push_str(&format!("data: {e}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{body}")
}

const USAGE: &str = r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Usage:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onUsageTracked", self.usage)

    async def usage(self, agent, ctx, payload):
        log(f"usage {payload['iteration_usage']['total_tokens']} {payload['session_totals']['total_tokens']}")
"#;

#[test]
fn usage_tracked_sums_the_sessions_calls_in_this_process() {
    use serde_json::json;
    let env = Env::new();
    env.plugin(
        "usage",
        "entry: usage_pkg:Usage\n",
        &[("usage_pkg/__init__.py", USAGE)],
    );
    env.enable(&["usage"]);
    let work = env.home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let usage = |n: u64| json!({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}});
    let url = stub(vec![
        sse(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            usage(10),
        ]),
        sse(&[
            json!({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            usage(20),
        ]),
    ]);
    let mut cmd = env.command(&[
        "run",
        "--model",
        "openai:m",
        "--base-url",
        &url,
        "--session",
        "u1",
        "--workspace",
        work.to_str().unwrap(),
        "hi",
    ]);
    cmd.env("OPENAI_API_KEY", "test");
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        env.log_lines(),
        vec!["usage 11 11", "usage 21 32"],
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

const EVICT: &str = r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


class Evict:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onSessionEvict", self.evict)

    async def evict(self, agent, ctx, payload):
        log(f"evict {payload['session_id']} agent={agent} ctx={ctx}")
"#;

#[test]
fn new_and_clear_evict_the_session() {
    let env = Env::new();
    env.plugin(
        "evict",
        "entry: evict_pkg:Evict\n",
        &[("evict_pkg/__init__.py", EVICT)],
    );
    env.enable(&["evict"]);
    let script = "turns:\n  - say: \"hello\"\n";
    let evicted = || {
        env.log_lines()
            .iter()
            .filter(|l| *l == "evict e1 agent=None ctx={}")
            .count()
    };
    // A plain turn: what eviction one process brings by itself (P14).
    let (out, report) = env.turn(script, &["--session", "e1"], "hi");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report["ended_by"], "answer");
    let per_process = evicted();
    // `/new` and `/clear` evict it once more each (P2).
    let mut expected = per_process;
    for command in ["/new", "/clear"] {
        let (out, report) = env.turn(script, &["--session", "e1"], command);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        assert_eq!(report["ended_by"], "command", "{report:#}");
        expected += per_process + 1;
        assert_eq!(evicted(), expected, "{command}: {:?}", env.log_lines());
    }
}

/// A class whose `meta` is `meta` (Python source), logging its import and
/// its `register`.
fn meta_plugin(class: &str, meta: &str) -> String {
    format!(
        r#"
import os


def log(line):
    with open(os.environ["CODU_LOG"], "a") as f:
        f.write(line + "\n")


log("import {class}")


class {class}:
    meta = {meta}

    def __init__(self, config=None, **kwargs):
        log("build {class}")

    async def register(self, bus):
        log("register {class}")
"#
    )
}

#[test]
fn meta_dependencies_add_to_the_manifests_and_order_the_load() {
    let env = Env::new();
    // Discovery order a, b, c, …; `a-app` has the lowest priority but its
    // class names `c-base` as a dependency (the manifest names none).
    let plugin = |key: &str, extra: &str, class: &str, meta: &str| {
        let package = format!("{}_pkg", key.replace('-', "_"));
        env.plugin(
            key,
            &format!("entry: {package}:{class}\n{extra}"),
            &[(&format!("{package}/__init__.py"), &meta_plugin(class, meta))],
        );
    };
    plugin(
        "a-app",
        "priority: 1\n",
        "App",
        r#"{"name": "a-app", "dependencies": ["c-base"]}"#,
    );
    plugin("b-mid", "priority: 50\n", "Mid", r#"{"name": "b-mid"}"#);
    plugin("c-base", "", "Base", r#"{"name": "c-base"}"#);
    // Named only in meta, and missing: kept out, and never built.
    plugin(
        "d-orphan",
        "",
        "Orphan",
        r#"{"name": "d-orphan", "dependencies": ["nowhere"]}"#,
    );
    // A cycle closed only by meta.
    plugin(
        "e-cyc",
        "dependencies: [f-cyc]\n",
        "CycE",
        r#"{"name": "e-cyc"}"#,
    );
    plugin(
        "f-cyc",
        "",
        "CycF",
        r#"{"name": "f-cyc", "dependencies": ["e-cyc"]}"#,
    );
    // meta["name"] differs from the manifest's: warned, the manifest wins;
    // meta["dependencies"] that is not a list: warned, ignored.
    plugin(
        "g-named",
        "",
        "Named",
        r#"{"name": "other-name", "dependencies": "c-base"}"#,
    );
    // An import that fails: reported once, its module run once.
    env.plugin(
        "h-broken",
        "entry: h_broken_pkg:Broken\n",
        &[(
            "h_broken_pkg/__init__.py",
            &format!(
                "{}\nraise RuntimeError('no database')\n",
                meta_plugin("Broken", "{}")
            ),
        )],
    );
    env.enable(&[
        "a-app", "b-mid", "c-base", "d-orphan", "e-cyc", "f-cyc", "g-named", "h-broken",
    ]);

    let out = env.run(&["plugins", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let err = stderr(&out);
    let status = |key: &str| {
        let r = record(&list, key);
        (
            r["status"].as_str().unwrap().to_string(),
            r["error"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(status("a-app"), ("loaded".into(), String::new()));
    assert_eq!(
        record(&list, "a-app")["dependencies"],
        serde_json::json!(["c-base"])
    );
    assert_eq!(
        status("d-orphan"),
        (
            "failed".into(),
            "dependency 'nowhere' is not loaded (no plugin with that key was found)".into()
        )
    );
    assert_eq!(
        record(&list, "d-orphan")["dependencies"],
        serde_json::json!(["nowhere"])
    );
    assert_eq!(status("e-cyc").1, "dependency cycle: e-cyc → f-cyc → e-cyc");
    assert_eq!(status("f-cyc").1, "dependency cycle: f-cyc → e-cyc → f-cyc");
    assert_eq!(status("g-named"), ("loaded".into(), String::new()));
    assert_eq!(
        status("h-broken"),
        ("failed".into(), "RuntimeError: no database".into())
    );
    assert_eq!(
        record(&list, "g-named")["dependencies"],
        serde_json::json!([])
    );
    assert!(
        err.contains("Codumentor plugin 'g-named': its class's meta[\"name\"] is 'other-name'; the manifest's name 'g-named' is used"),
        "{err}"
    );
    assert!(
        err.contains("Codumentor plugin 'g-named': its class's meta[\"dependencies\"] is not a list of plugin keys; ignored"),
        "{err}"
    );

    // Two phases: every module is imported (in the manifests' order) before
    // any class is built; then the classes are built and registered in the
    // order resolved with meta: c-base before a-app despite a-app's priority.
    let lines = env.log_lines();
    assert_eq!(
        lines.iter().filter(|l| *l == "import Broken").count(),
        1,
        "{lines:#?}"
    );
    let first_build = lines.iter().position(|l| l.starts_with("build")).unwrap();
    assert!(
        lines[first_build..]
            .iter()
            .all(|l| !l.starts_with("import")),
        "{lines:#?}"
    );
    let built: Vec<&str> = lines[first_build..]
        .iter()
        .filter(|l| l.starts_with("register"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        built,
        [
            "register Mid",
            "register Base",
            "register App",
            "register Named"
        ],
        "{lines:#?}"
    );
    for kept_out in ["Orphan", "CycE", "CycF"] {
        assert!(
            !lines.contains(&format!("build {kept_out}")),
            "{kept_out}: {lines:#?}"
        );
    }
    let keys: Vec<&str> = list
        .iter()
        .filter(|p| p["status"] == "loaded")
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["b-mid", "c-base", "a-app", "g-named"]);

    // doctor shows the meta edge and the resolved order.
    let out = env.run(&["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("loads after: c-base"), "{text}");
    assert!(
        text.contains("codumentor load order: b-mid → c-base → a-app → g-named\n"),
        "{text}"
    );
    let out = env.run(&["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["codumentor_load_order"],
        serde_json::json!(["b-mid", "c-base", "a-app", "g-named"])
    );
}

/// Counts every handler of this plugin sees; one raises on every call.
const COUNTED: &str = r#"
class Counted:
    meta = {"name": "counted"}

    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onPromptAssemble", self.assemble)
        bus.on("onToolInvokeStart", self.tool_start)
        bus.on("onAfterLLM", self.broken)
        bus.on("onSessionEvict", self.evict)
        bus.on("onAtQuery", self.at_query)

    async def assemble(self, agent, ctx, payload):
        return None

    async def tool_start(self, agent, ctx, payload):
        return None

    async def broken(self, agent, ctx, payload):
        raise RuntimeError("after-llm is broken")

    async def evict(self, agent, ctx, payload):
        return None

    async def at_query(self, agent, ctx, payload):
        return None
"#;

/// The doctor report of a host that ran a turn (what `/plugins`-style
/// callers of the Rust API see): every hook callback with its live counts,
/// not only the failing ones; `plugins doctor` alone shows them at 0.
#[test]
fn doctor_counts_every_hook_callback_of_this_process() {
    use plughost::agent::provider::scripted::{Script, Scripted};
    use plughost::agent::tools::{self, ToolLimits, Workspace};
    use plughost::agent::{Agent, AgentConfig, Inbound};
    use plughost::host::doctor::{HookCounts, Report};

    let env = Env::new();
    env.plugin(
        "counted",
        "entry: counted_pkg:Counted\n",
        &[("counted_pkg/__init__.py", COUNTED)],
    );
    env.enable(&["counted"]);
    let row = |rows: &[HookCounts], event: &str| -> (u64, u64) {
        let r = rows
            .iter()
            .find(|r| r.event == event)
            .unwrap_or_else(|| panic!("no {event} in {rows:#?}"));
        (r.calls, r.errors)
    };

    // The CLI: every callback listed, nothing called yet.
    let out = env.run(&["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let diag = report["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "counted")
        .unwrap()
        .clone();
    let mut listed: Vec<(String, String, u64)> = diag["hook_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap().to_string(),
                r["callback"].as_str().unwrap().to_string(),
                r["calls"].as_u64().unwrap() + r["errors"].as_u64().unwrap(),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            (
                "onAfterLLM".to_string(),
                "counted_pkg.Counted.broken".to_string(),
                0
            ),
            ("onAtQuery".into(), "counted_pkg.Counted.at_query".into(), 0),
            (
                "onPromptAssemble".into(),
                "counted_pkg.Counted.assemble".into(),
                0
            ),
            (
                "onSessionEvict".into(),
                "counted_pkg.Counted.evict".into(),
                0
            ),
            (
                "onToolInvokeStart".into(),
                "counted_pkg.Counted.tool_start".into(),
                0
            ),
        ],
        "{diag:#}"
    );
    assert_eq!(diag["hook_problems"], serde_json::json!([]));
    assert_eq!(
        report["codumentor_load_order"],
        serde_json::json!(["counted"])
    );
    let text = String::from_utf8_lossy(&env.run(&["plugins", "doctor"]).stdout).into_owned();
    assert!(text.contains("codumentor load order: counted\n"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("    hook calls: "))
        .unwrap_or_else(|| panic!("{text}"));
    for part in [
        "onPromptAssemble 0",
        "onToolInvokeStart 0",
        "onAfterLLM 0",
        "onSessionEvict 0",
        "onAtQuery 0",
    ] {
        assert!(line.contains(part), "{line}");
    }

    // A host that ran a two-iteration turn with one tool call.
    let workspace = Workspace::new(&env.home.path().join("workspace")).unwrap();
    let mut builder = crate::common::builder()
        .home(env.home.path())
        .bundled_dir(env.bundled.path());
    for tool in tools::builtin_tools(&workspace, &ToolLimits::default()) {
        builder = builder.tool(tool);
    }
    let host = builder.build().unwrap();
    let script = "turns:\n  - tool_calls:\n      - name: read_file\n        args: {path: missing.txt}\n  - say: done\n";
    let provider = Arc::new(Scripted::new(Script::parse(script, "test.yaml").unwrap()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let agent = {
        let _g = rt.enter();
        Agent::new(Arc::new(host), provider, AgentConfig::default(), None)
    };
    let report = rt.block_on(agent.send(Inbound::new("s", "hi"), None));
    assert_eq!(report.iterations, 2, "{report:?}");
    assert_eq!(report.hook_errors.len(), 2, "{report:?}");

    let doctor = Report::new(agent.host());
    let diag = doctor.plugins.iter().find(|p| p.key == "counted").unwrap();
    assert_eq!(row(&diag.hook_counts, "onPromptAssemble"), (2, 0));
    assert_eq!(row(&diag.hook_counts, "onToolInvokeStart"), (1, 0));
    assert_eq!(row(&diag.hook_counts, "onAfterLLM"), (2, 2));
    assert_eq!(row(&diag.hook_counts, "onAtQuery"), (0, 0));
    assert_eq!(row(&diag.hook_counts, "onSessionEvict"), (0, 0));
    // hook_problems keeps its contract: only the failing callback.
    assert_eq!(diag.hook_problems.len(), 1, "{:#?}", diag.hook_problems);
    assert_eq!(diag.hook_problems[0].errors, 2);
    let text = doctor.text();
    assert!(
        text.contains("onPromptAssemble 2") && text.contains("onAfterLLM 2 (2 not used)"),
        "{text}"
    );
    assert_eq!(doctor.codumentor_load_order, ["counted"]);
}
