//! Hermes context engines (`agent/context_engine.py`): the one engine
//! `context.engine` names replaces plughost's compaction, and is driven as
//! Hermes's agent drives it, through lanes of the event model:
//!
//! | Hermes                                          | plughost point |
//! |-------------------------------------------------|----------------|
//! | `on_session_start(session_id, hermes_home=…, platform=…, model=…)` | `on_session_start` |
//! | `update_from_response(usage)` after every model call | P8 `model_replied` |
//! | manual `/compress`: `compress(messages, current_tokens, focus_topic=None, force=True)`, its list the new transcript | P2c `compact_before` ([`LoopDecision::ReplaceTranscript`]) |
//! | `on_session_reset()` on `/new` / `/reset`        | `on_session_reset` |
//! | `on_session_end(session_id, messages)`          | `on_session_finalize` |
//! | `get_tool_schemas` / `handle_tool_call`         | tools in the registry (toolset `context_engine`) |
//!
//! Selection as Hermes's `agent_init` does it: `context.engine` (plughost's
//! `config.json` `{"context": {"engine": NAME}}` first, else Hermes's
//! `config.yaml`) must name the engine; unset or `compressor` keeps the
//! built-in compaction and never activates a plugin's engine. One engine
//! per host: a second registration is refused with a warning, as in Hermes.
//!
//! An engine call that raises is logged with its traceback and the turn
//! goes on; a `compress` that raises (or answers something that is not a
//! list of messages) leaves `/compact` to plughost's own compaction.
//!
//! Decisions where Hermes differs or is silent:
//! - plughost compacts on `/compact` only (it has no automatic compaction),
//!   so `should_compress` is not asked; the engine's token counters are kept
//!   up to date all the same, and `compress` gets `current_tokens` from the
//!   last model call.
//! - The engine sees the stored transcript (plughost's system prompt is not
//!   stored); a system message in its answer is left out of the transcript.
//! - `/compact` with nothing plughost would drop answers "Nothing to
//!   compact." before the engine is asked (P2c fires only when there is
//!   something to compact).
//! - Hermes's bundled `plugins/context_engine/<name>/` directories have no
//!   plughost counterpart: an engine comes from a plugin's
//!   `register_context_engine`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Map, Value};

use crate::core::extensions::Extensions;
use crate::core::hooks::{
    HookAction, HookCallback, HookEvent, HookPayload, HookReturn, LoopDecision,
};
use crate::core::registry::Registration;
use crate::runtime::{plugin_error, try_attach};

/// The toolset an engine's tools are offered in.
pub const TOOLSET: &str = "context_engine";

/// The doctor's word for the kind ([`super::providers::ProviderStates`]).
const KIND: &str = "context_engine";

/// The active engine of a host.
struct ActiveEngine {
    plugin: String,
    name: String,
    engine: Py<PyAny>,
    /// Per session: the conversation as of the last turn (for `on_session_end`).
    sessions: Mutex<HashMap<String, Vec<Value>>>,
    /// `prompt_tokens` of the last model call (`current_tokens` of `compress`).
    last_prompt_tokens: Mutex<Option<u64>>,
}

impl ActiveEngine {
    /// `engine.method(*args, **kwargs)`; a raise is logged with its
    /// traceback and gives `None`.
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: impl pyo3::call::PyCallArgs<'py>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> Option<Bound<'py, PyAny>> {
        match self.engine.bind(py).call_method(method, args, kwargs) {
            Ok(v) => Some(v),
            Err(e) => {
                self.raised(py, method, &e);
                None
            }
        }
    }

    fn raised(&self, py: Python<'_>, what: &str, e: &PyErr) {
        let error = plugin_error(py, e);
        tracing::warn!(
            "context engine '{}' (plugin '{}') {what}() raised {}; the turn goes on\n{}",
            self.name,
            self.plugin,
            error.described(),
            error.traceback.as_deref().unwrap_or("")
        );
    }

    /// P2c: the engine's new transcript, `None` when it raised or answered
    /// something that is not a message list (plughost's compaction then runs).
    fn compress(&self, py: Python<'_>, messages: Vec<Value>) -> Option<Vec<Value>> {
        let current = *self
            .last_prompt_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let attempt = || -> PyResult<Vec<Value>> {
            let helper = py
                .import("agent.context_engine")?
                .getattr("_plughost_compress")?;
            let list = pythonize::pythonize(py, &messages)?;
            let out = helper.call1((self.engine.bind(py), list, current))?;
            let out: Value = crate::runtime::value::to_json(&out).unwrap_or(Value::Null);
            if !out.is_array() {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "compress() answered what is not JSON",
                ));
            }
            Ok(out
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] != "system")
                .cloned()
                .collect())
        };
        match attempt() {
            Ok(list) => {
                tracing::info!(
                    "context engine '{}' compacted {} message(s) into {}",
                    self.name,
                    messages.len(),
                    list.len()
                );
                Some(list)
            }
            Err(e) => {
                self.raised(py, "compress", &e);
                tracing::warn!(
                    "context engine '{}' failed; plughost's own compaction runs instead",
                    self.name
                );
                None
            }
        }
    }

    /// P8: `update_from_response(usage)`, with Hermes's three required
    /// keys always present.
    fn update(&self, py: Python<'_>, usage: &Map<String, Value>) -> PyResult<()> {
        let mut usage = usage.clone();
        for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            usage.entry(key).or_insert(Value::from(0));
        }
        *self
            .last_prompt_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = usage["prompt_tokens"].as_u64();
        let usage = pythonize::pythonize(py, &Value::Object(usage))?;
        self.call(py, "update_from_response", (usage,), None);
        Ok(())
    }

    fn started(&self, py: Python<'_>, session: &str, model: &str) -> PyResult<()> {
        let kw = PyDict::new(py);
        kw.set_item(
            "hermes_home",
            super::discover::hermes_home().to_string_lossy().as_ref(),
        )?;
        kw.set_item("platform", "cli")?;
        kw.set_item("model", model)?;
        self.call(py, "on_session_start", (session,), Some(&kw));
        Ok(())
    }

    fn ended(&self, py: Python<'_>, session: &str) -> PyResult<()> {
        let messages = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session)
            .unwrap_or_default();
        let messages = pythonize::pythonize(py, &messages)?;
        self.call(py, "on_session_end", (session, messages), None);
        Ok(())
    }

    fn remember(&self, session: &str, f: impl FnOnce(&mut Vec<Value>)) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        f(sessions.entry(session.to_string()).or_default())
    }
}

/// Which part of the engine's lifecycle a lane subscription drives.
#[derive(Clone, Copy)]
enum Part {
    Compress,
    Usage,
    History,
    TurnEnd,
    Start,
    Reset,
    End,
}

struct EngineHook {
    engine: Arc<ActiveEngine>,
    part: Part,
}

impl HookCallback for EngineHook {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let e = &self.engine;
        let mut action = HookAction::Continue;
        match (self.part, payload) {
            (Part::Compress, HookPayload::Loop(c)) => {
                let mut all = c.messages.clone();
                all.extend(c.kept.iter().cloned());
                if let Ok(Some(list)) = try_attach(|py| e.compress(py, all)) {
                    action = HookAction::Decide(LoopDecision::ReplaceTranscript(list));
                }
            }
            (Part::Usage, HookPayload::Loop(c)) if !c.delegate => {
                run(e, "update_from_response", |py| e.update(py, &c.usage));
            }
            (Part::History, HookPayload::Loop(c)) if !c.delegate => {
                let conversation = c.messages.iter().filter(|m| m["role"] != "system");
                let conversation: Vec<Value> = conversation.cloned().collect();
                e.remember(&c.session_id, |m| *m = conversation);
            }
            (Part::TurnEnd, HookPayload::Loop(c)) if !c.delegate && !c.text.is_empty() => {
                let answer = serde_json::json!({"role": "assistant", "content": c.text});
                e.remember(&c.session_id, |m| m.push(answer));
            }
            (Part::Start, HookPayload::Session(c)) => {
                run(e, "on_session_start", |py| {
                    e.started(py, &c.session_id, &c.model)
                });
            }
            (Part::Reset, HookPayload::Session(_)) => {
                run(e, "on_session_reset", |py| {
                    e.call(py, "on_session_reset", (), None);
                    Ok(())
                });
            }
            (Part::End, HookPayload::Session(c)) => {
                run(e, "on_session_end", |py| e.ended(py, &c.session_id));
            }
            _ => {}
        }
        HookReturn::Ready(Ok(action))
    }
}

/// Run a part under the interpreter; plughost's own failures (a value that
/// does not convert) are logged like the engine's.
fn run(e: &ActiveEngine, what: &str, f: impl FnOnce(Python<'_>) -> PyResult<()>) {
    let outcome = try_attach(|py| f(py).map_err(|err| plugin_error(py, &err).described()));
    if let Ok(Err(err)) = outcome {
        tracing::warn!(
            "context engine '{}' (plugin '{}'): {what} failed: {err}; the turn goes on",
            e.name,
            e.plugin
        );
    }
}

/// The host's engine, once one is active: `(plugin, engine name)`.
#[derive(Default)]
pub struct EngineSlot(Mutex<Option<(String, String)>>);

impl EngineSlot {
    pub fn active(&self) -> Option<(String, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// `ctx.register_context_engine(engine)`: the lanes and tools that make it
/// the host's compaction when `context.engine` names it; `None` (registered,
/// not used, its state recorded for `plugins doctor`) otherwise; empty, with
/// a warning, for what Hermes would refuse.
pub fn register(
    py: Python<'_>,
    plugin: &str,
    host: &Arc<Extensions>,
    home: &Path,
    engine: &Bound<'_, PyAny>,
) -> PyResult<Option<Vec<Registration>>> {
    let base = py
        .import("agent.context_engine")?
        .getattr("ContextEngine")?;
    let name = engine
        .getattr("name")
        .ok()
        .and_then(|n| n.extract::<String>().ok())
        .filter(|n| !n.trim().is_empty());
    let Some(name) = name.filter(|_| engine.is_instance(&base).unwrap_or(false)) else {
        tracing::warn!("Plugin '{plugin}' tried to register a context engine that is not a ContextEngine with a name. Ignoring.");
        return Ok(Some(Vec::new()));
    };
    let states = host.get::<super::providers::ProviderStates>();
    let wanted = super::providers::configured_key(home, "context", "engine");
    if wanted.as_deref() != Some(name.as_str()) {
        let why = match wanted.as_deref() {
            None | Some("compressor") => {
                "not active: context.engine is 'compressor' (plughost's own /compact); set context.engine to use it".to_string()
            }
            Some(w) => format!("not active: context.engine is '{w}'"),
        };
        states.record(plugin, KIND, &name, why);
        return Ok(None);
    }
    {
        let slot = host.get::<EngineSlot>();
        let mut active = slot.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((owner, other)) = active.as_ref() {
            tracing::warn!("Plugin '{plugin}' tried to register a context engine, but '{other}' (plugin '{owner}') is already registered. Only one context engine plugin is allowed.");
            return Ok(Some(Vec::new()));
        }
        *active = Some((plugin.to_string(), name.clone()));
    }
    states.record(
        plugin,
        KIND,
        &name,
        "active (context.engine; replaces plughost's /compact)".into(),
    );
    let engine = Arc::new(ActiveEngine {
        plugin: plugin.to_string(),
        name: name.clone(),
        engine: engine.clone().unbind(),
        sessions: Mutex::default(),
        last_prompt_tokens: Mutex::default(),
    });
    let lanes = [
        (HookEvent::CompactBefore, Part::Compress, "compress"),
        (HookEvent::ModelReplied, Part::Usage, "update_from_response"),
        (HookEvent::HistoryReady, Part::History, "messages"),
        (HookEvent::TurnEnded, Part::TurnEnd, "messages"),
        (HookEvent::SessionOpened, Part::Start, "on_session_start"),
        (HookEvent::SessionCleared, Part::Reset, "on_session_reset"),
        (HookEvent::SessionClosing, Part::End, "on_session_end"),
    ];
    let mut out = super::lanes::provider_hooks(plugin, &name, lanes, |part| {
        Arc::new(EngineHook {
            engine: Arc::clone(&engine),
            part,
        })
    });
    out.extend(tools(py, plugin, host, &engine)?);
    Ok(Some(out))
}

/// The engine's `get_tool_schemas()` as registry tools whose handler is its
/// `handle_tool_call` (read at activation: the tool table is fixed once the
/// host is built).
fn tools(
    py: Python<'_>,
    plugin: &str,
    host: &Arc<Extensions>,
    engine: &ActiveEngine,
) -> PyResult<Vec<Registration>> {
    let Some(schemas) = engine.call(py, "get_tool_schemas", (), None) else {
        return Ok(Vec::new());
    };
    let schemas: Value = crate::runtime::value::to_json(&schemas).unwrap_or(Value::Null);
    super::provider_tools::ProviderTools {
        plugin,
        provider: &engine.engine,
        what: "context engine",
        name: &engine.name,
        helper_module: "agent.context_engine",
        toolset: TOOLSET,
    }
    .registrations(py, host, &schemas)
}
