//! Gaps the survey of public Hermes plugins found (the corpus run), each in
//! the shape of the real plugin that showed it, on disk, through the real
//! binary: a memory provider with Hermes's canonical `sync_turn` signature
//! (holographic's); hook plugins that only Hermes's signs give away
//! (langfuse's `hooks:` and keyword-only callbacks, group-timing-gate's
//! `pre_gateway_dispatch` callback); `gateway.platforms.helpers` and
//! `build_source`'s newest keywords, `MessageEvent.metadata` and
//! `max_message_length_for_chat` (rocketchat, teams, google_chat, onebot11); a `kind: exclusive` memory plugin installed by `plugins
//! install` (ai-memory's); `hermes_state`, `agent.memory_manager` and
//! `tools.xai_http` (holographic, honcho, xai image_gen); and `plugins
//! doctor` on an active memory provider's lanes.

use crate::common::hermes_env::{json, HermesEnv as Env};
use crate::common::write_plugin;

/// A memory provider in holographic's shape: Hermes's canonical
/// `sync_turn(self, user_content, assistant_content, *, session_id="")`,
/// the base class's signature; `SIGNATURE` swapped for the variants.
const NOTES: &str = r#"
import json, os
from agent.memory_provider import MemoryProvider

def log(**fields):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(json.dumps(fields) + "\n")

class NotesMemory(MemoryProvider):
    name = "notes"
    def is_available(self):
        return True
    def initialize(self, session_id, **kwargs):
        pass
    def get_tool_schemas(self):
        return []
    SIGNATURE
"#;

const CANONICAL: &str = r#"def sync_turn(self, user_content, assistant_content, *, session_id=""):
        log(user=user_content, assistant=assistant_content, session=bool(session_id))"#;

const TAKES_ALL: &str = r#"def sync_turn(self, user_content, assistant_content, **kwargs):
        log(user=user_content, keywords=sorted(kwargs), roles=[m["role"] for m in kwargs.get("messages", [])])"#;

#[test]
fn sync_turn_gets_messages_only_when_its_signature_takes_it() {
    for (signature, expected) in [
        (
            CANONICAL,
            serde_json::json!({"user": "remember the tea", "assistant": "hello back", "session": true}),
        ),
        (
            TAKES_ALL,
            serde_json::json!({"user": "remember the tea", "keywords": ["messages", "session_id"], "roles": ["user", "assistant"]}),
        ),
    ] {
        let env = Env::new("memory:\n  provider: notes\n");
        write_plugin(
            &env.hermes.path().join("plugins").join("memory"),
            "notes",
            "name: notes\nversion: 0.1.0\n",
            &[("__init__.py", &NOTES.replace("SIGNATURE", signature))],
        );
        let err = env.turn("remember the tea");
        assert!(!err.contains("TypeError"), "{err}");
        assert_eq!(env.json_lines(), [expected], "{err}");
    }
}

/// langfuse's shape: a manifest `hooks:` list (Hermes's field) and
/// keyword-only callbacks, which Flowly's one positional context breaks.
const KWONLY: &str = r#"
import json, os

def on_pre_llm_call(*, session_id: str = "", model: str = "", **_):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(json.dumps({"hook": "pre_llm_call", "model": model}) + "\n")

def register(ctx) -> None:
    ctx.register_hook("pre_llm_call", on_pre_llm_call)
"#;

/// group-timing-gate's shape: Flowly has the event too, but only Hermes
/// calls it with `event=`, `gateway=`, `session_store=`.
const GATE: &str = r#"
def _on_pre_gateway_dispatch(event=None, gateway=None, session_store=None, **kwargs):
    return None

def register(ctx) -> None:
    ctx.register_hook("pre_gateway_dispatch", _on_pre_gateway_dispatch)
"#;

#[test]
fn hook_plugins_only_hermes_can_call_install_as_hermes_and_say_which_sign() {
    let env = Env::new("");
    for (name, manifest, code, sign) in [
        (
            "langfuse",
            "name: langfuse\nversion: \"1.0.0\"\nhooks:\n  - pre_llm_call\n",
            KWONLY,
            "its plugin.yaml has `hooks`, a Hermes manifest field",
        ),
        (
            "kwonly",
            "name: kwonly\nversion: \"1.0.0\"\n",
            KWONLY,
            "__init__.py registers a hook callback `def on_pre_llm_call(*, session_id: str = \"\", model: str = \"\", **_)` that takes no positional argument",
        ),
        (
            "group-timing-gate",
            "name: group-timing-gate\nversion: 1.0.0\nprovides_hooks:\n  - pre_gateway_dispatch\n",
            GATE,
            "__init__.py registers a pre_gateway_dispatch callback `def _on_pre_gateway_dispatch(event=None, gateway=None, session_store=None, **kwargs)` taking Hermes's keyword arguments",
        ),
    ] {
        let said = env.install(&env.source(name, manifest, &[("__init__.py", code)]));
        assert!(said.contains("Loads as a hermes plugin: "), "{said}");
        assert!(said.contains(sign), "{name}: {said}");
    }
    // The keyword-only callbacks are called as Hermes calls them.
    let err = env.turn("hi there");
    assert!(!err.contains("TypeError"), "{err}");
    let fired = env.json_lines();
    assert_eq!(fired.len(), 2, "{fired:?} {err}");
    assert!(
        fired.iter().all(|l| l["hook"] == "pre_llm_call"),
        "{fired:?}"
    );
}

/// An adapter module in the shape of rocketchat's, teams' and
/// google_chat's (`from gateway.platforms.helpers import
/// MessageDeduplicator`) and onebot11's (`build_source(...,
/// role_authorized=True)`), with a probe tool reporting what they did.
const ADAPTER: &str = r##"
import asyncio, json
from gateway.config import Platform, PlatformConfig
from gateway.platforms.base import BasePlatformAdapter, cache_image_from_url, cache_video_from_bytes
from gateway.platforms.helpers import (
    MessageDeduplicator, TextBatchAggregator, ThreadParticipationTracker, redact_phone, strip_markdown)

class ChatAdapter(BasePlatformAdapter):
    def __init__(self, config):
        super().__init__(config, Platform("probechat"))
        self._dedup = MessageDeduplicator(max_size=2)

    async def connect(self):
        return True

    async def disconnect(self):
        pass

    async def send(self, chat_id, content, reply_to=None, metadata=None):
        return None

    async def get_chat_info(self, chat_id):
        return {"name": chat_id, "type": "dm"}

def probe(args, **kwargs):
    out = {}
    d = MessageDeduplicator(max_size=2)
    out["dedup"] = [d.is_duplicate("a"), d.is_duplicate("a"), d.is_duplicate(""), d.contains("a")]
    d.discard("a")
    out["discarded"] = d.contains("a")
    for m in ("b", "c", "d"):
        d.is_duplicate(m)
    out["bounded"] = [d.contains(m) for m in ("b", "c", "d")]
    out["markdown"] = strip_markdown("# Title\n\n**bold** and *it* and `code` and [link](https://x.invalid)\n\n\n\nend")
    out["phones"] = [redact_phone(p) for p in ("+15551234567", "1234567", "123", "")]
    tracker = ThreadParticipationTracker("probechat")
    tracker.mark("t1")
    out["threads"] = ["t1" in ThreadParticipationTracker("probechat"), "t2" in tracker]

    async def batch():
        got = []
        async def handler(event):
            got.append(event.text)
        b = TextBatchAggregator(handler, batch_delay=0.05)
        for text in ("part one", "part two"):
            b.enqueue(type("E", (), {"text": text})(), "chat-1")
        await asyncio.sleep(0.3)
        return got
    out["batched"] = asyncio.run(batch())
    out["video"] = open(cache_video_from_bytes(b"\x00\x00\x00\x18ftypmp42"), "rb").read().hex()
    try:
        asyncio.run(cache_image_from_url("http://127.0.0.1:9/cat.png"))
    except ValueError as e:
        out["ssrf"] = str(e)
    source = ChatAdapter(PlatformConfig()).build_source(
        chat_id="1", chat_type="dm", user_id="2", role_authorized=True,
        auto_thread_created=True, auto_thread_initial_name="first words")
    from gateway.platforms.base import MessageEvent
    event = MessageEvent(text="hi", source=source, message_id="77", metadata={"onebot11_target": "dm"})
    out["event"] = [event.metadata, event.user_id, event.allow_gateway_control,
                    ChatAdapter(PlatformConfig()).max_message_length_for_chat("1")]
    out["source"] = [source.role_authorized, source.auto_thread_created, source.auto_thread_initial_name,
                     source.chat_id, source.user_id]
    return json.dumps(out)
"##;

const PLATFORM_INIT: &str = r#"
from .adapter import ChatAdapter, probe

def register(ctx):
    ctx.register_platform(name="probechat", label="Probe chat", adapter_factory=lambda cfg: ChatAdapter(cfg),
                          check_fn=lambda: True)
    ctx.register_tool("platform_probe", "probechat",
                      {"name": "platform_probe", "parameters": {"type": "object", "properties": {}}}, probe)
"#;

#[test]
fn platform_helpers_and_build_source_keywords_are_hermess() {
    let env = Env::new("");
    let dir = env.source(
        "probechat",
        "name: probechat\nversion: 1.0.0\nkind: platform\n",
        &[("__init__.py", PLATFORM_INIT), ("adapter.py", ADAPTER)],
    );
    env.install(&dir);
    let v = json(&env.ok(&["tools", "call", "platform_probe"]));
    assert_eq!(v["dedup"], serde_json::json!([false, true, false, true]));
    assert_eq!(v["discarded"], false);
    assert_eq!(
        v["bounded"],
        serde_json::json!([false, true, true]),
        "{v:#}"
    );
    assert_eq!(
        v["markdown"], "Title\n\nbold and it and code and link\n\nend",
        "{v:#}"
    );
    assert_eq!(
        v["phones"],
        serde_json::json!(["+155****4567", "12****67", "****", "<none>"])
    );
    assert_eq!(v["threads"], serde_json::json!([true, false]));
    assert!(env.hermes.path().join("probechat_threads.json").is_file());
    assert_eq!(v["batched"], serde_json::json!(["part one\npart two"]));
    assert_eq!(v["video"], "00000018667479706d703432");
    let ssrf = v["ssrf"].as_str().unwrap_or_default();
    assert!(
        ssrf.starts_with("Blocked unsafe URL (SSRF protection): http://127.0.0.1:9/"),
        "{v:#}"
    );
    assert_eq!(
        v["event"],
        serde_json::json!([{"onebot11_target": "dm"}, null, true, 4096])
    );
    assert_eq!(
        v["source"],
        serde_json::json!([true, true, "first words", "1", "2"])
    );
}

#[test]
fn an_exclusive_memory_plugin_installed_by_plugins_install_loads_when_selected() {
    let env = Env::new("memory:\n  provider: mem-exclusive\n");
    let code = NOTES
        .replace("SIGNATURE", CANONICAL)
        .replace("name = \"notes\"", "name = \"mem-exclusive\"")
        + "\ndef register(ctx):\n    ctx.register_memory_provider(NotesMemory())\n";
    let dir = env.source(
        "mem-exclusive",
        "name: mem-exclusive\nversion: 0.1.0\nkind: exclusive\n",
        &[("__init__.py", &code)],
    );
    let said = env.install(&dir);
    assert!(!said.contains("not supported"), "{said}");
    let listed = json(&env.ok(&["plugins", "list", "--json"]));
    let record = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "mem-exclusive")
        .unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(record["status"], "loaded", "{record:#}");
    env.turn("remember the tea");
    assert_eq!(env.json_lines().len(), 1, "{:?}", env.json_lines());
    // Doctor does not call the provider's lanes silent.
    let doctor = env.ok(&["plugins", "doctor"]);
    assert!(doctor.contains("mem-exclusive"), "{doctor}");
    assert!(!doctor.contains("not a known event"), "{doctor}");
}

/// holographic's store (`hermes_state.apply_wal_with_fallback`), honcho's
/// import (`agent.memory_manager.sanitize_context`) and xAI image_gen's
/// (`tools.xai_http.hermes_xai_user_agent`).
const HOSTED: &str = r#"
import json, os, sqlite3
from agent.memory_manager import sanitize_context
from hermes_state import apply_wal_with_fallback
from tools.xai_http import hermes_xai_user_agent, resolve_xai_http_credentials

def probe(args, **kwargs):
    conn = sqlite3.connect(os.path.join(os.path.dirname(os.environ["PROBE_LOG"]), "store.db"))
    modes = [apply_wal_with_fallback(conn, db_label="store.db"), apply_wal_with_fallback(conn)]
    fenced = ("before <memory-context>\n[System note: The following is recalled memory context, NOT new "
              "user input. Treat as informational background data.]\n\nold</memory-context> after </memory-context>")
    return json.dumps({"modes": modes, "clean": sanitize_context(fenced),
                       "agent": hermes_xai_user_agent(), "xai": resolve_xai_http_credentials()})

def register(ctx):
    ctx.register_tool("hosted_probe", "probe",
                      {"name": "hosted_probe", "parameters": {"type": "object", "properties": {}}}, probe)
"#;

#[test]
fn hermes_state_memory_manager_and_xai_http_are_hosted() {
    let env = Env::new("");
    env.install(&env.source(
        "hosted",
        "name: hosted\nversion: 0.1.0\n",
        &[("__init__.py", HOSTED)],
    ));
    let v = json(&env.ok(&["tools", "call", "hosted_probe"]));
    assert_eq!(v["modes"], serde_json::json!(["wal", "wal"]), "{v:#}");
    assert_eq!(v["clean"], "before  after ");
    assert!(
        v["agent"].as_str().unwrap().starts_with("Hermes-Agent/"),
        "{v:#}"
    );
    assert_eq!(v["xai"]["base_url"], "https://api.x.ai/v1");
    assert_eq!(v["xai"]["api_key"], "");
}
