//! The last Hermes compatibility details (issue 52 item 3), each in the
//! shape of the real plugin that showed it, on disk, through the real
//! binary: `ctx.emit` delivers `callback(**payload)` as Hermes's
//! `plugin_runtime/dispatch.py` `_deliver_event` does;
//! `hermes_cli.config.set_config_value(..., force=True)`;
//! `tools.env_passthrough` and `agent.video_gen_provider`'s constants;
//! Hermes's `plugin_runtime` package; a `handler(args, task_id=None)`
//! detected as Hermes at install; a Flowly plugin's known toolset kept;
//! memory plugin directories loaded as Hermes's memory loader loads them;
//! an async web-extract provider; `spawn_task` tasks of a running loop
//! cancelled when the host stops.

use crate::common::hermes_env::{json, HermesEnv as Env};
use crate::common::write_plugin;
use serde_json::Value;

/// A journal plugin that announces each saved entry on the event bus, the
/// way Hermes plugins talk to each other (`ctx.emit("saved", {...})`), and
/// reads its own event back with the request id its command set.
const JOURNAL: &str = r#"
import contextvars, os

REQUEST = contextvars.ContextVar("request", default="none")

def log(line):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(line + "\n")

def register(ctx):
    def on_own(path, tags):
        log(f"journal sees {path} in request {REQUEST.get()}")
    ctx.subscribe("journal:saved", on_own)

    def save(raw):
        REQUEST.set("r-17")
        return f"delivered to {ctx.emit('saved', {'path': raw.strip(), 'tags': ['draft']})}"
    ctx.register_command("save", save, description="Save an entry")
"#;

/// Subscribers in Hermes's shape (keyword arguments), one that edits what
/// it got, one that takes everything, an `async def` one, and one written
/// for plughost's old `(event, payload)` call, which Hermes's rule breaks.
const INDEXER: &str = r#"
import os

def log(line):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(line + "\n")

def register(ctx):
    def on_saved(path, tags):
        tags.append("indexed")
        log(f"index {path} {tags}")

    def on_any(**payload):
        log(f"any {sorted(payload)} {payload['tags']}")

    async def on_async(path, **_):
        log(f"async {path}")

    def old_style(event, payload):
        log("old style ran")

    for cb in (on_saved, old_style, on_any, on_async):
        ctx.subscribe("journal:saved", cb)
"#;

#[test]
fn emit_calls_each_subscriber_with_the_payload_as_keyword_arguments() {
    if crate::common::in_process_only(
        "emit_calls_each_subscriber_with_the_payload_as_keyword_arguments",
        "it pins that a subscriber runs in a copy of the emitter's contextvars; an event crossing to another process carries its payload, not the emitter's context (docs/isolation.md, parity gaps)",
    ) {
        return;
    }
    let env = Env::new("plugins:\n  enabled: [journal, indexer]\n");
    for (name, init) in [("journal", JOURNAL), ("indexer", INDEXER)] {
        write_plugin(
            &env.hermes.path().join("plugins"),
            name,
            &format!("name: {name}\nversion: 1.0.0\n"),
            &[("__init__.py", init)],
        );
    }
    let out = env.run(&["commands", "run", "/save notes/a.md"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "delivered to 5",
        "{stderr}"
    );
    // Delivered in subscription order (indexer loads first), each with a fresh deep copy (the
    // edit of `tags` is not seen by the next one), in a copy of the
    // emitter's context (the request id its command set); the subscriber
    // that takes (event, payload) fails as under Hermes and is logged,
    // naming the event and the fields it provides, and the others still get it.
    assert_eq!(
        env.lines(),
        [
            "index notes/a.md ['draft', 'indexed']",
            "any ['path', 'tags'] ['draft']",
            "async notes/a.md",
            "journal sees notes/a.md in request r-17",
        ],
        "{stderr}"
    );
    assert!(
        stderr.contains("Event 'journal:saved' callback old_style (plugin indexer) raised")
            && stderr.contains("(event provides: path, tags)"),
        "{stderr}"
    );
}

/// In the shape of a real plugin's setup command (it wires an MCP server
/// into Hermes's config with `set_config_value(key, value, force=True)`,
/// every value a CLI string), then reads the config back.
const WIRING: &str = r#"
import json, os
from hermes_cli.config import set_config_value, load_config

DESK = "desk"

def wire(args, **kwargs):
    for key, value in (
        (f"mcp_servers.{DESK}.url", "http://127.0.0.1:9/mcp"),
        (f"mcp_servers.{DESK}.headers.Authorization", "Bearer ${DESK_KEY}"),
        (f"mcp_servers.{DESK}.connect_timeout", "30"),
        (f"mcp_servers.{DESK}.enabled", "true"),
        ("plugins.entries.wiring.mcp_allowlist", f'["{DESK}"]'),
        ("approvals.mode", "off"),
        ("agent.temperature", "0.9"),
        ("agent.stop", "[unclosed"),
    ):
        set_config_value(key, value, force=True)
    set_config_value("model", "gpt-x")
    out = {}
    try:
        set_config_value("display", "plain")
    except ValueError as e:
        out["refused"] = str(e)
    set_config_value("tts", "off", force=True)
    set_config_value("DESK_API_KEY", "k-123", force=True)
    out["config"] = load_config()
    out["env"] = os.environ.get("DESK_API_KEY")
    return json.dumps(out)

def register(ctx):
    ctx.register_tool("wire", "setup", {"name": "wire", "parameters": {"type": "object", "properties": {}}}, wire)
"#;

#[test]
fn set_config_value_takes_force_and_types_values_as_hermes_does() {
    let env = Env::new(
        "plugins:\n  enabled: [wiring]\nmodel:\n  provider: openrouter\ndisplay:\n  skin: mono\n  compact: true\ntts:\n  provider: edge\n",
    );
    write_plugin(
        &env.hermes.path().join("plugins"),
        "wiring",
        "name: wiring\n",
        &[("__init__.py", WIRING)],
    );
    let v = json(&env.ok(&["tools", "call", "wire"]));
    let config = &v["config"];
    let desk = &config["mcp_servers"]["desk"];
    assert_eq!(desk["url"], "http://127.0.0.1:9/mcp", "{v:#}");
    assert_eq!(desk["headers"]["Authorization"], "Bearer ${DESK_KEY}");
    assert_eq!(desk["connect_timeout"], 30);
    assert_eq!(desk["enabled"], true);
    assert_eq!(
        config["plugins"]["entries"]["wiring"]["mcp_allowlist"],
        serde_json::json!(["desk"])
    );
    assert_eq!(config["plugins"]["enabled"], serde_json::json!(["wiring"]));
    // A string setting is never coerced; an exact decimal is a float.
    assert_eq!(config["approvals"]["mode"], "off");
    assert_eq!(config["agent"]["temperature"], 0.9);
    // Neither JSON nor YAML: kept as the string it was.
    assert_eq!(config["agent"]["stop"], "[unclosed");
    // `model` alone is `model.default`, the section kept.
    assert_eq!(config["model"]["default"], "gpt-x");
    assert_eq!(config["model"]["provider"], "openrouter");
    // Another section is refused without force, replaced with it.
    let refused = v["refused"].as_str().unwrap();
    assert!(
        refused.starts_with("Cannot set 'display' to a scalar — 'display' is a configuration section with 2 sub-key(s)."),
        "{refused}"
    );
    assert!(refused.contains("force=True"), "{refused}");
    assert_eq!(config["display"]["skin"], "mono");
    assert_eq!(config["tts"], false);
    // A credential-shaped key goes to `.env` and the environment.
    assert_eq!(v["env"], "k-123");
    let dotenv = std::fs::read_to_string(env.hermes.path().join(".env")).unwrap();
    assert!(dotenv.contains("DESK_API_KEY=k-123"), "{dotenv}");
    assert!(config.get("DESK_API_KEY").is_none(), "{v:#}");
}

/// A video backend and a skill helper in the shape of Hermes's own:
/// `DEFAULT_ASPECT_RATIO` in a signature, `tools.env_passthrough` at import.
const MEDIA: &str = r#"
import json
from agent.video_gen_provider import (DEFAULT_ASPECT_RATIO, DEFAULT_RESOLUTION, VideoGenProvider,
                                      success_response)
from tools.env_passthrough import (clear_env_passthrough, get_all_passthrough, is_env_passthrough,
                                   register_env_passthrough)

class Clips(VideoGenProvider):
    name = "clips"
    def generate(self, prompt, *, aspect_ratio=DEFAULT_ASPECT_RATIO, resolution=DEFAULT_RESOLUTION, **kw):
        return success_response(video="/tmp/x.mp4", model="m", prompt=prompt,
                                aspect_ratio=aspect_ratio, provider=self.name)

def probe(args, **kwargs):
    register_env_passthrough(["TENOR_API_KEY", "OPENAI_API_KEY", ""])
    out = {
        "video": Clips().generate("a cat"),
        "tenor": is_env_passthrough("TENOR_API_KEY"),
        "openai": is_env_passthrough("OPENAI_API_KEY"),
        "from_config": is_env_passthrough("MAPS_KEY"),
        "all": sorted(get_all_passthrough()),
    }
    clear_env_passthrough()
    out["after_clear"] = sorted(get_all_passthrough())
    return json.dumps(out)

def register(ctx):
    ctx.register_video_gen_provider(Clips())
    ctx.register_tool("media_probe", "media", {"name": "media_probe"}, probe)
"#;

#[test]
fn env_passthrough_and_the_video_constants_are_there_as_in_hermes() {
    let env = Env::new(
        "plugins:\n  enabled: [media]\nterminal:\n  env_passthrough: [MAPS_KEY, ANTHROPIC_API_KEY]\n",
    );
    write_plugin(
        &env.hermes.path().join("plugins"),
        "media",
        "name: media\n",
        &[("__init__.py", MEDIA)],
    );
    let v = json(&env.ok(&["tools", "call", "media_probe"]));
    assert_eq!(v["video"]["aspect_ratio"], "16:9", "{v:#}");
    assert_eq!(v["video"]["success"], true);
    assert_eq!(v["tenor"], true);
    // Hermes's own provider credentials never pass, from a skill or the config.
    assert_eq!(v["openai"], false);
    assert_eq!(v["from_config"], true);
    assert_eq!(v["all"], serde_json::json!(["MAPS_KEY", "TENOR_API_KEY"]));
    assert_eq!(v["after_clear"], serde_json::json!(["MAPS_KEY"]));
}

/// A plugin written against Hermes's new `plugin_runtime` package.
const RUNTIME: &str = r#"
import json
from plugin_runtime.context import PluginContext
from plugin_runtime.dispatch import VALID_HOOKS, VALID_MIDDLEWARE, resolve_plugin_command_result
from plugin_runtime.manager import PluginManager, get_plugin_manager
from plugin_runtime.manifest import PluginManifest, manifest_key
from hermes_cli import plugins as legacy

SEEN = {}

def register(ctx):
    manager = get_plugin_manager()
    SEEN["is_context"] = isinstance(ctx, PluginContext)
    SEEN["hooks"] = "pre_verify" in VALID_HOOKS and VALID_HOOKS == legacy.VALID_HOOKS
    SEEN["middleware"] = sorted(VALID_MIDDLEWARE)
    SEEN["manager"] = isinstance(manager, PluginManager) and legacy.get_plugin_manager() is manager
    SEEN["has_other"] = manager.has_plugin("other")
    SEEN["has_nobody"] = manager.has_plugin("nobody")
    SEEN["key"] = manifest_key(PluginManifest(name="x", key="cat/x"))
    async def answer():
        return 42
    SEEN["resolved"] = resolve_plugin_command_result(answer())
    try:
        manager.invoke_hook("pre_tool_call", tool_name="x")
    except NotImplementedError as e:
        SEEN["invoke"] = str(e)
    def probe(args, **kw):
        # A helper process the plugin starts imports the same names.
        import subprocess, sys
        child = subprocess.run(
            [sys.executable, "-c", "from plugin_runtime.dispatch import VALID_HOOKS; "
             "from plugin_runtime.manager import get_plugin_manager; "
             "print(len(VALID_HOOKS), get_plugin_manager().has_plugin('other'))"],
            capture_output=True, text=True, timeout=60)
        SEEN["child"] = child.stdout.strip() or child.stderr.strip()
        return json.dumps(SEEN)
    ctx.register_tool("runtime_probe", "probe", {"name": "runtime_probe"}, probe)
"#;

#[test]
fn the_plugin_runtime_package_maps_onto_what_plughost_serves() {
    let env = Env::new("");
    let other = env.source(
        "other",
        "name: other\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.on_unload(lambda: None)\n",
        )],
    );
    env.install(&other);
    let dir = env.source(
        "runtime",
        "name: runtime\nversion: 1.0.0\n",
        &[("__init__.py", RUNTIME)],
    );
    let said = env.install(&dir);
    assert!(
        said.contains(
            "Loads as a hermes plugin: __init__.py imports plugin_runtime, a Hermes module"
        ),
        "{said}"
    );
    let v = json(&env.ok(&["tools", "call", "runtime_probe"]));
    assert_eq!(v["is_context"], true, "{v:#}");
    assert_eq!(v["hooks"], true);
    assert_eq!(
        v["middleware"],
        serde_json::json!([
            "llm_execution",
            "llm_request",
            "tool_execution",
            "tool_request"
        ])
    );
    assert_eq!(v["manager"], true);
    assert_eq!(v["has_other"], true);
    assert_eq!(v["has_nobody"], false);
    assert_eq!(v["key"], "cat/x");
    assert_eq!(v["resolved"], 42);
    assert_eq!(v["child"], "39 False", "{v:#}");
    assert!(
        v["invoke"]
            .as_str()
            .unwrap()
            .contains("is not hosted by plughost: plugin code cannot fire hooks itself"),
        "{v:#}"
    );
}

/// In the shape of the real plugin: a manifest with only the fields Flowly
/// shares, `register_tool` by keyword, and a handler `(args, task_id=None)`
/// without `**kwargs`.
const LOOKUP: &str = r#"
import json

SCHEMA = {"name": "lookup", "description": "Look a word up",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}

def lookup(args, task_id=None):
    return json.dumps({"word": args["word"], "task_id": task_id})

def register(ctx):
    ctx.register_tool(name="lookup", toolset="dictionary", schema=SCHEMA, handler=lookup)
"#;

#[test]
fn a_handler_taking_args_and_task_id_installs_as_hermes_and_says_why() {
    let env = Env::new("");
    let dir = env.source(
        "dictionary",
        "name: dictionary\nversion: 0.3.0\ndescription: Words\n",
        &[("__init__.py", LOOKUP)],
    );
    let said = env.install(&dir);
    assert!(
        said.contains("Loads as a hermes plugin: __init__.py defines a tool handler the Hermes way, `def lookup(args, task_id=None)`"),
        "{said}"
    );
    assert!(said.contains("--dialect NAME"), "{said}");
    let v = json(&env.ok(&["tools", "call", "lookup", "--args", "{\"word\": \"tea\"}"]));
    // Called the Hermes way, `handler(args, task_id=…)` (no task outside a turn).
    assert_eq!(v["word"], "tea", "{v:#}");
    assert!(v["task_id"].is_null(), "{v:#}");
}

#[test]
fn a_flowly_plugin_keeps_a_known_toolset_and_an_unknown_one_joins_extensions() {
    let env = Env::new("");
    let flowly = "def register(ctx):\n    ctx.register_tool('snap', {'type': 'object', 'properties': {}}, lambda: 'ok', toolset='media')\n    ctx.register_tool('odd', {'type': 'object', 'properties': {}}, lambda: 'ok', toolset='made-up')\n";
    let dir = env.source(
        "camera",
        "name: camera\nversion: 1.0.0\n",
        &[("__init__.py", flowly)],
    );
    let said = env.install(&dir);
    assert!(said.contains("Loads as a flowly plugin"), "{said}");
    let listed: Vec<Value> = serde_json::from_str(&env.ok(&["tools", "list", "--json"])).unwrap();
    let toolset =
        |name: &str| listed.iter().find(|t| t["name"] == name).unwrap()["toolset"].clone();
    assert_eq!(toolset("snap"), "media", "{listed:#?}");
    assert_eq!(toolset("odd"), "extensions");
}

/// A memory plugin directory with a `MemoryProvider` subclass and no
/// `register()`: Hermes's memory loader instantiates the class.
const SHELF: &str = r#"
import json, os
from agent.memory_provider import MemoryProvider

def log(line):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(line + "\n")

class _Abstract(MemoryProvider):
    def __init__(self):
        raise RuntimeError("not this one")

class Shelf(MemoryProvider):
    @property
    def name(self):
        return "shelf"
    def is_available(self):
        return True
    def initialize(self, session_id, **kwargs):
        pass
    def get_tool_schemas(self):
        return [{"name": "shelf_where", "description": "Where the provider lives",
                 "parameters": {"type": "object", "properties": {}}}]
    def handle_tool_call(self, tool_name, args, **kwargs):
        return json.dumps({"module": type(self).__module__, "package": __spec__.parent})
    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None):
        log(json.dumps({"sync": [m["role"] for m in messages or []]}))
"#;

/// In the shape of a flat-entry memory plugin: `register` is defined only
/// when Hermes's memory loader imports it (as `_hermes_user_memory.<name>`).
const FLAT: &str = r#"
import json
from agent.memory_provider import MemoryProvider

class Flat(MemoryProvider):
    name = "flat"
    def is_available(self):
        return True
    def get_tool_schemas(self):
        return [{"name": "flat_where", "parameters": {"type": "object", "properties": {}}}]
    def handle_tool_call(self, tool_name, args, **kwargs):
        return json.dumps({"module": __name__})

if (__spec__.parent or "").startswith("_hermes_user_memory"):
    def register(ctx):
        ctx.register_memory_provider(Flat())
"#;

const EMPTY: &str = "from agent.memory_provider import MemoryProvider\n\nBASE = MemoryProvider\n";

const BOOM: &str = "from agent.memory_provider import MemoryProvider\n\nraise RuntimeError('backend unreachable')\n";

const SAY: &str = "turns:\n  - say: \"hello back\"\n";

#[test]
fn memory_plugin_directories_load_as_hermess_memory_loader_loads_them() {
    for (provider, tool, module) in [
        ("shelf", "shelf_where", "_hermes_user_memory.shelf"),
        ("flat", "flat_where", "_hermes_user_memory.flat"),
    ] {
        let env = Env::new(&format!("memory:\n  provider: {provider}\n"));
        let plugins = env.hermes.path().join("plugins");
        for (name, init) in [("shelf", SHELF), ("flat", FLAT)] {
            write_plugin(
                &plugins,
                name,
                &format!("name: {name}\n"),
                &[("__init__.py", init)],
            );
        }
        let v = json(&env.ok(&["tools", "call", tool]));
        assert_eq!(v["module"], module, "{v:#}");
        if provider == "shelf" {
            assert_eq!(v["package"], "_hermes_user_memory.shelf");
            // The instantiated provider is driven through a turn: sync_turn gets `messages=`.
            let script = env.home.path().join("say.yaml");
            std::fs::write(&script, SAY).unwrap();
            env.ok(&[
                "run",
                "hi there",
                "--model",
                "scripted",
                "--script",
                script.to_str().unwrap(),
            ]);
            assert_eq!(env.lines(), [r#"{"sync": ["user", "assistant"]}"#]);
        }
    }
    // Neither register() nor a subclass that instantiates, or an import
    // that raises: the load fails, saying so.
    for (name, init, expected) in [
        ("empty", EMPTY, "memory provider 'empty' has no register() function and no MemoryProvider subclass that instantiates"),
        ("boom", BOOM, "RuntimeError: backend unreachable"),
    ] {
        let env = Env::new(&format!("memory:\n  provider: {name}\n"));
        write_plugin(
            &env.hermes.path().join("plugins"),
            name,
            &format!("name: {name}\n"),
            &[("__init__.py", init)],
        );
        let listed: Vec<Value> =
            serde_json::from_str(&env.ok(&["plugins", "list", "--json"])).unwrap();
        let record = listed
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{listed:#?}"));
        assert!(record.to_string().contains(expected), "{record:#}");
    }
}

/// A web backend whose `extract` is `async def`, and whose sync `search`
/// hands back its async helper's coroutine.
const WEB: &str = r#"
import asyncio
from agent.web_search_provider import WebSearchProvider

class Reader(WebSearchProvider):
    name = "reader"
    def is_available(self):
        return True
    def supports_search(self):
        return True
    def supports_extract(self):
        return True
    async def _search(self, query, limit):
        await asyncio.sleep(0)
        return {"success": True, "data": {"web": [
            {"title": f"about {query}", "url": "https://docs.example.invalid/s", "description": "d", "position": 1}]}}
    def search(self, query, limit=5):
        return self._search(query, limit)
    async def extract(self, urls, **kwargs):
        await asyncio.sleep(0)
        return [{"url": u, "title": "T", "content": f"text of {u}"} for u in urls]

def register(ctx):
    ctx.register_web_search_provider(Reader())
"#;

/// In-process, and from the plugin's worker (its provider's methods run
/// there; plughost's tools reach it through a stand-in).
#[test]
fn an_async_web_extract_provider_answers_web_extract() {
    let env = Env::new("plugins:\n  enabled: [reader]\n");
    write_plugin(
        &env.hermes.path().join("plugins"),
        "reader",
        "name: reader\nkind: backend\n",
        &[("__init__.py", WEB)],
    );
    for isolate in ["none", "all"] {
        let v = json(&env.ok(&[
            "--isolate",
            isolate,
            "tools",
            "call",
            "web_extract",
            "--args",
            r#"{"urls": ["https://docs.example.invalid/a"]}"#,
        ]));
        assert_eq!(v["success"], true, "{isolate}: {v:#}");
        assert_eq!(v["backend"], "reader");
        assert_eq!(
            v["results"][0]["content"],
            "text of https://docs.example.invalid/a"
        );
        let text = env.ok(&[
            "--isolate",
            isolate,
            "tools",
            "call",
            "web_search",
            "--args",
            r#"{"query": "tea"}"#,
        ]);
        assert!(text.contains("about tea"), "{isolate}: {text}");
    }
}

/// A plugin that starts its background work from an async tool call, on
/// the loop that runs it (Hermes's `spawn_task` needs a running loop).
const WATCHER: &str = r#"
import asyncio, json, os

def log(line):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(line + "\n")

async def poll():
    try:
        while True:
            await asyncio.sleep(3600)
    except asyncio.CancelledError:
        log("poll cancelled")
        raise

def register(ctx):
    async def start(args, **kwargs):
        task = ctx.spawn_task(poll(), name="poll")
        await asyncio.sleep(0)
        return json.dumps({"task": type(task).__name__})
    ctx.register_tool("watch", "watch", {"name": "watch"}, start, is_async=True)
"#;

#[test]
fn a_task_spawned_on_a_running_loop_is_cancelled_when_the_host_stops() {
    let env = Env::new("plugins:\n  enabled: [watcher]\n");
    write_plugin(
        &env.hermes.path().join("plugins"),
        "watcher",
        "name: watcher\n",
        &[("__init__.py", WATCHER)],
    );
    let v = json(&env.ok(&["tools", "call", "watch"]));
    assert_eq!(v["task"], "Task", "{v:#}");
    assert_eq!(env.lines(), ["poll cancelled"]);
}
