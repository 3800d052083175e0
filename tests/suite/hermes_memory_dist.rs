//! Hermes memory providers shipped as distributions (issue 22): a wheel
//! built here with the standard library declares two
//! `hermes_agent.memory_providers` entry points — a `MemoryProvider`
//! subclass and a factory function — and is pip-installed offline with
//! `--target`. `memory.provider` selects one by its entry-point name; it is
//! driven through `plughost run` and `plughost serve`'s
//! `/v1/chat/completions` with the scripted model, and the other is listed
//! as not enabled with how to select it.
use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded};
use serde_json::{json, Value};

const MODULE: &str = r#"
import json, os
from agent.memory_provider import MemoryProvider

def _log(event, **fields):
    with open(os.environ["MEM_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")

class DistMemory(MemoryProvider):
    label = "distmem"

    @property
    def name(self):
        return self.label

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        _log("initialize", provider=self.label)

    def prefetch(self, query, *, session_id=""):
        _log("prefetch", query=query)
        return f"{self.label} recalls: the user likes oolong"

    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None):
        _log("sync_turn", user=user_content)

    def get_tool_schemas(self):
        return [{"name": f"{self.label}_store", "description": "Store a fact",
                 "parameters": {"type": "object", "properties": {"fact": {"type": "string"}},
                                "required": ["fact"]}}]

    def handle_tool_call(self, tool_name, args, **kwargs):
        _log("tool", tool=tool_name)
        return json.dumps({"stored_by": self.label, "fact": args["fact"]})

def make():
    provider = DistMemory()
    provider.label = "distfactory"
    return provider
"#;

const BUILD_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
out, module = sys.argv[1], sys.argv[2]
info = "hermes_mem_demo-0.3.0.dist-info"
files = {
    "hermes_mem_demo/__init__.py": open(module).read(),
    info + "/METADATA": "Metadata-Version: 2.1\nName: hermes-mem-demo\nVersion: 0.3.0\n",
    info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: plughost-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    info + "/entry_points.txt": "[hermes_agent.memory_providers]\ndistmem = hermes_mem_demo:DistMemory\ndistfactory = hermes_mem_demo:make\n",
}
record = []
with zipfile.ZipFile(out + "/hermes_mem_demo-0.3.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(info + "/RECORD,,")
    z.writestr(info + "/RECORD", "\n".join(record) + "\n")
"#;

fn script(tool: &str) -> String {
    format!(
        "turns:\n  - tool_calls:\n      - name: {tool}\n        args: {{fact: \"oolong\"}}\n  - say: \"noted: {{tool_results}}\"\n"
    )
}

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
    work: tempfile::TempDir,
    site: PathBuf,
}

impl Env {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env("PYTHONPATH", &self.site)
            .env("MEM_LOG", self.log())
            .env_remove("VIRTUAL_ENV")
            .env_remove("PLUGHOST_LOG")
            .env_remove("HERMES_SAFE_MODE");
        cmd
    }

    fn log(&self) -> PathBuf {
        self.work.path().join("mem.log")
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn script(&self, tool: &str) -> PathBuf {
        let path = self.work.path().join("script.yaml");
        std::fs::write(&path, script(tool)).unwrap();
        path
    }
}

/// The wheel, pip-installed offline, with `memory.provider: <provider>` in
/// Hermes's config.yaml; `None` (the reason printed) without pip.
fn installed(provider: &str) -> Option<Env> {
    let has_pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pip {
        common::missing(
            "pip for python3",
            "apt-get install python3-pip, or python3 -m ensurepip",
        );
    }
    let work = tempfile::tempdir().unwrap();
    let module = work.path().join("module.py");
    std::fs::write(&module, MODULE).unwrap();
    let built = Command::new("python3")
        .args(["-c", BUILD_WHEEL])
        .arg(work.path())
        .arg(&module)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let site = work.path().join("site");
    let pip = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--no-index", "--target"])
        .arg(&site)
        .arg(work.path().join("hermes_mem_demo-0.3.0-py3-none-any.whl"))
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .unwrap();
    assert!(pip.status.success(), "{pip:?}");
    let env = Env {
        home: home_with(&[]),
        hermes: tempfile::tempdir().unwrap(),
        bundled: no_bundled(),
        work,
        site,
    };
    std::fs::write(
        env.hermes.path().join("config.yaml"),
        format!("memory:\n  provider: {provider}\n"),
    )
    .unwrap();
    Some(env)
}

fn names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

fn run_turn(env: &Env, tool: &str) -> Value {
    let script = env.script(tool);
    let out = run_bounded(
        env.command(&[
            "run",
            "remember my favourite tea",
            "--json",
            "--model",
            "scripted",
            "--script",
            script.to_str().unwrap(),
        ]),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_entry_point_memory_provider_is_selected_by_name_and_driven_through_a_turn() {
    let Some(env) = installed("distmem") else {
        return;
    };
    let out = run_bounded(
        env.command(&["plugins", "list", "--json"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let chosen = list.iter().find(|p| p["key"] == "distmem").unwrap();
    assert_eq!(chosen["source"], "entrypoint", "{chosen:#}");
    assert_eq!(chosen["kind"], "exclusive", "{chosen:#}");
    assert_eq!(chosen["status"], "loaded", "{chosen:#}");
    assert_eq!(chosen["tools"], json!(["distmem_store"]), "{chosen:#}");
    let other = list.iter().find(|p| p["key"] == "distfactory").unwrap();
    assert_eq!(other["enabled"], false, "{other:#}");
    let why = other["error"].as_str().unwrap_or_default();
    assert!(why.contains("the active one is 'distmem'"), "{other:#}");
    assert!(why.contains("memory.provider: distfactory"), "{other:#}");

    let turn = run_turn(&env, "distmem_store");
    let result: Value =
        serde_json::from_str(turn["tool_calls"][0]["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        result,
        json!({"stored_by": "distmem", "fact": "oolong"}),
        "{turn:#}"
    );
    let user = turn["model_calls"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        user.contains("<memory-context>")
            && user.contains("distmem recalls: the user likes oolong"),
        "{user}"
    );
    let events = env.events();
    assert_eq!(
        names(&events),
        ["initialize", "prefetch", "tool", "sync_turn"],
        "{events:#?}"
    );
}

#[test]
fn a_factory_entry_point_gives_its_provider() {
    let Some(env) = installed("distfactory") else {
        return;
    };
    let turn = run_turn(&env, "distfactory_store");
    assert_eq!(turn["tool_calls"][0]["outcome"], "ok", "{turn:#}");
    let result: Value =
        serde_json::from_str(turn["tool_calls"][0]["result"].as_str().unwrap()).unwrap();
    assert_eq!(result["stored_by"], "distfactory", "{turn:#}");
    let events = env.events();
    assert_eq!(events[0]["provider"], "distfactory", "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_point_memory_provider_answers_through_serve() {
    let Some(env) = installed("distmem") else {
        return;
    };
    let script = env.script("distmem_store");
    let child = env
        .command(&[
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--script",
            script.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = common::chat_once(child, "remember my favourite tea").await;
    assert_eq!(status, 200, "{body:#}");
    let reply = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(reply.contains(r#""stored_by": "distmem""#), "{body:#}");
    let events = env.events();
    let seen = names(&events);
    for event in ["initialize", "prefetch", "tool", "sync_turn"] {
        assert!(seen.contains(&event), "{event} missing: {events:#?}");
    }
    let prefetch = events.iter().find(|e| e["event"] == "prefetch").unwrap();
    assert_eq!(prefetch["query"], "remember my favourite tea");
}

/// A directory provider of the same name, under `$HERMES_HOME/plugins/memory/`.
const SHADOW: &str = r#"
import json, os
from agent.memory_provider import MemoryProvider

class Shadow(MemoryProvider):
    name = "distmem"
    def is_available(self): return True
    def get_tool_schemas(self):
        return [{"name": "distmem_store", "description": "Store a fact",
                 "parameters": {"type": "object", "properties": {"fact": {"type": "string"}}}}]
    def handle_tool_call(self, tool_name, args, **kwargs):
        return json.dumps({"stored_by": "directory"})

def register(ctx):
    ctx.register_memory_provider(Shadow())
"#;

#[test]
fn a_directory_provider_of_the_same_name_wins_over_the_entry_point() {
    let Some(env) = installed("distmem") else {
        return;
    };
    let memory = env.hermes.path().join("plugins").join("memory");
    common::write_plugin(
        &memory,
        "distmem",
        "name: distmem\nversion: 0.1.0\n",
        &[("__init__.py", SHADOW)],
    );
    let turn = run_turn(&env, "distmem_store");
    let result: Value =
        serde_json::from_str(turn["tool_calls"][0]["result"].as_str().unwrap()).unwrap();
    assert_eq!(result["stored_by"], "directory", "{turn:#}");
    assert!(env.events().is_empty(), "the entry point was never loaded");
}
