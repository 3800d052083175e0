//! Hermes memory providers (`agent/memory_provider.py`): the one active
//! provider, driven as Hermes's `MemoryManager` drives it, through lanes
//! of the event model rather than a case in the agent loop:
//!
//! | Hermes                                   | plughost point          |
//! |------------------------------------------|-------------------------|
//! | `initialize` (once per session), `system_prompt_block`, `on_turn_start`, `prefetch` | P4 `history_ready` (once per turn) |
//! | the recall, fenced, appended to the turn's user message in every model call | P6 `prompt_final` (this call only) |
//! | `sync_turn`, `queue_prefetch`            | P13 `turn_ended`        |
//! | `on_session_end(messages)`               | `on_session_finalize`   |
//! | `shutdown`                               | the host dropped        |
//! | `get_tool_schemas` / `handle_tool_call`  | tools in the registry (toolset `memory`) |
//!
//! Selection ([`select`]): Hermes's `memory.provider` (its `config.yaml`)
//! or plughost's (`config.json` `{"memory": {"provider": NAME}}`, which
//! wins) names the one memory plugin that loads; the others are listed as
//! not enabled, saying so. A provider call that raises is logged with its
//! traceback and the turn goes on (the lanes fail open). Subagent turns
//! skip memory, as Hermes's `skip_memory=True` delegates do.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;

use crate::core::extensions::Extensions;
use crate::core::hooks::{HookAction, HookCallback, HookEvent, HookPayload, HookReturn};
use crate::core::registry::Registration;
use crate::plugins::discovery::Candidate;
use crate::plugins::format::Verdict;
use crate::plugins::manifest::PluginKind;
use crate::runtime::{plugin_error, try_attach};

/// The toolset a memory provider's tools are offered in (Hermes's).
pub const TOOLSET: &str = "memory";

/// What one session's turns share with the provider.
#[derive(Default)]
struct SessionMemory {
    initialized: bool,
    turns: u64,
    /// This turn's user message and its fenced recall.
    user: String,
    recall: String,
    /// The conversation as of the last turn (for `on_session_end`).
    messages: Vec<Value>,
}

/// The active provider of a host.
pub struct ActiveMemory {
    plugin: String,
    name: String,
    provider: Py<PyAny>,
    sessions: Mutex<HashMap<String, SessionMemory>>,
    /// `shutdown()` was called.
    shut: std::sync::atomic::AtomicBool,
}

impl Drop for ActiveMemory {
    /// Hermes calls `shutdown()` when its agent closes; a host's provider
    /// lives as long as the host (or its plugin, see [`shut_down_for`]).
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl ActiveMemory {
    /// `provider.shutdown()`, once.
    fn shutdown(&self) {
        if self.shut.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let _ = try_attach(|py| {
            self.call(py, "shutdown", (), None);
        });
    }
}

/// Plugin `plugin` of `host` is let go (unloaded, or its worker ends): the
/// provider it made active shuts down now, whoever still holds it (a
/// worker process ends without dropping what its plugin registered).
pub fn shut_down_for(host: &Extensions, plugin: &str) {
    let Some(slot) = host.peek::<MemorySlot>() else {
        return;
    };
    let memory = slot.1.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(memory) = memory.and_then(|m| m.upgrade()) {
        if memory.plugin == plugin {
            memory.shutdown();
        }
    }
}

impl ActiveMemory {
    /// `provider.method(*args, **kwargs)`; a raise is logged with its
    /// traceback and gives `None`.
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: impl pyo3::call::PyCallArgs<'py>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> Option<Bound<'py, PyAny>> {
        match self.provider.bind(py).call_method(method, args, kwargs) {
            Ok(v) => Some(v),
            Err(e) => {
                let error = plugin_error(py, &e);
                tracing::warn!(
                    "memory provider '{}' (plugin '{}') {method}() raised {}; the turn goes on\n{}",
                    self.name,
                    self.plugin,
                    error.described(),
                    error.traceback.as_deref().unwrap_or("")
                );
                None
            }
        }
    }

    /// A provider's text answer (`None` and non-strings as `""`).
    fn string(v: Option<Bound<'_, PyAny>>) -> String {
        v.filter(|v| !v.is_none())
            .and_then(|v| v.str().ok().map(|s| s.to_string()))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// P4: initialise the session once, then this turn's system block, tick and recall.
    fn before_turn(&self, py: Python<'_>, session: &str, messages: &mut [Value]) -> PyResult<()> {
        let query = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string();
        // The session's turn number: what this process counted, or what
        // its transcript says if more (the session's earlier turns ran in
        // another process — a replica, a restart — where Hermes's one
        // long-lived agent would have counted them; after a compaction the
        // transcript says less, and the count stands).
        let user_turns = messages.iter().filter(|m| m["role"] == "user").count() as u64;
        let first = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let s = sessions.entry(session.to_string()).or_default();
            s.turns = (s.turns + 1).max(user_turns);
            s.user = query.clone();
            s.recall.clear();
            // The conversation, as Hermes's `messages` (its system prompt apart).
            s.messages = messages
                .iter()
                .filter(|m| m["role"] != "system")
                .cloned()
                .collect();
            !std::mem::replace(&mut s.initialized, true)
        };
        if first {
            let kw = PyDict::new(py);
            kw.set_item("session_id", session)?;
            kw.set_item(
                "hermes_home",
                super::discover::hermes_home().to_string_lossy().as_ref(),
            )?;
            kw.set_item("platform", "cli")?;
            kw.set_item("agent_context", "primary")?;
            self.call(py, "initialize", (), Some(&kw));
        }
        let block = Self::string(self.call(py, "system_prompt_block", (), None));
        if !block.is_empty() {
            if let Some(system) = messages.first_mut().filter(|m| m["role"] == "system") {
                let text = system["content"].as_str().unwrap_or_default();
                system["content"] = Value::String(if text.is_empty() {
                    block
                } else {
                    format!("{text}\n\n{block}")
                });
            }
        }
        let turns = self.session(session, |s| s.turns);
        self.call(py, "on_turn_start", (turns, query.as_str()), None);
        let helpers = py.import("agent.memory_provider")?;
        let trivial: bool = helpers
            .getattr("is_trivial_prompt")?
            .call1((query.as_str(),))?
            .extract()?;
        if trivial {
            return Ok(());
        }
        let kw = PyDict::new(py);
        kw.set_item("session_id", session)?;
        let Some(raw) = self.call(py, "prefetch", (query.as_str(),), Some(&kw)) else {
            return Ok(());
        };
        let fenced: String = helpers
            .getattr("_plughost_fence")?
            .call1((raw,))?
            .extract()?;
        self.session(session, |s| s.recall = fenced);
        Ok(())
    }

    /// P13: `sync_turn` and `queue_prefetch` after a turn that answered.
    fn after_turn(&self, py: Python<'_>, session: &str, answer: &str) -> PyResult<()> {
        let (user, mut messages) = self.session(session, |s| {
            s.recall.clear();
            (std::mem::take(&mut s.user), s.messages.clone())
        });
        messages.push(serde_json::json!({"role": "assistant", "content": answer}));
        self.session(session, |s| s.messages = messages.clone());
        // `messages` only if `sync_turn` takes it (Hermes's `sync_all`):
        // its canonical signature has `session_id` alone.
        let optional = PyDict::new(py);
        optional.set_item("messages", pythonize::pythonize(py, &messages)?)?;
        let kw = py
            .import("agent.memory_provider")?
            .getattr("_plughost_sync_kwargs")?
            .call1((self.provider.bind(py), session, optional))?
            .cast_into::<PyDict>()?;
        self.call(py, "sync_turn", (user.as_str(), answer), Some(&kw));
        let kw = PyDict::new(py);
        kw.set_item("session_id", session)?;
        self.call(py, "queue_prefetch", (user.as_str(),), Some(&kw));
        Ok(())
    }

    /// `on_session_end(messages)` for a session that used the provider.
    fn session_ended(&self, py: Python<'_>, session: &str) -> PyResult<()> {
        let ended = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
        if let Some(s) = ended.filter(|s| s.initialized) {
            let messages = pythonize::pythonize(py, &s.messages)?;
            self.call(py, "on_session_end", (messages,), None);
        }
        Ok(())
    }

    fn session<R>(&self, key: &str, f: impl FnOnce(&mut SessionMemory) -> R) -> R {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        f(sessions.entry(key.to_string()).or_default())
    }

    /// This call's copy of the turn's user message gets the fenced recall
    /// appended (`content + "\n\n" + block`, as Hermes's `run_agent` does
    /// at every API call); the transcript keeps the user's words.
    fn inject(&self, session: &str, messages: &mut [Value]) {
        let (user, recall) = {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            match sessions.get(session) {
                Some(s) if !s.recall.is_empty() => (s.user.clone(), s.recall.clone()),
                _ => return,
            }
        };
        let is_user = |m: &&mut Value| m["role"] == "user";
        let mut users = messages.iter_mut().rev().filter(is_user);
        let target = users.find(|m| m["content"].as_str().is_some_and(|c| c.contains(&user)));
        if let Some(m) = target {
            let text = m["content"].as_str().unwrap_or_default();
            m["content"] = Value::String(format!("{text}\n\n{recall}"));
        }
    }
}

/// The lanes the active provider is driven on, the part each drives, and
/// its label.
const LANES: [(HookEvent, Part, &str); 4] = [
    (HookEvent::HistoryReady, Part::BeforeTurn, "prefetch"),
    (HookEvent::PromptFinal, Part::Inject, "memory-context"),
    (HookEvent::TurnEnded, Part::AfterTurn, "sync_turn"),
    (
        HookEvent::SessionClosing,
        Part::SessionEnd,
        "on_session_end",
    ),
];

/// `event` is the name a memory provider's lane subscription is listed
/// under (the bus's name of a lane no Hermes hook names, as
/// `history_ready`): plughost fires it.
pub fn is_memory_lane(event: &str) -> bool {
    LANES
        .iter()
        .any(|(lane, _, _)| super::lanes::name_of(*lane) == event)
}

/// Which part of the provider's lifecycle a lane subscription drives.
#[derive(Clone, Copy)]
enum Part {
    BeforeTurn,
    Inject,
    AfterTurn,
    SessionEnd,
}

struct MemoryHook {
    memory: Arc<ActiveMemory>,
    part: Part,
}

impl HookCallback for MemoryHook {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let m = &self.memory;
        let action = match (self.part, payload) {
            (Part::Inject, HookPayload::Loop(c)) if !c.delegate => {
                m.inject(&c.session_id, &mut c.messages);
                HookAction::Continue
            }
            (Part::BeforeTurn, HookPayload::Loop(c)) if !c.delegate => {
                let session = c.session_id.clone();
                run(m, "prefetch", |py| {
                    m.before_turn(py, &session, &mut c.messages)
                });
                HookAction::Continue
            }
            (Part::AfterTurn, HookPayload::Loop(c)) if !c.delegate => {
                if c.ended_by == crate::core::hooks::EndedBy::Answer && !c.text.is_empty() {
                    run(m, "sync_turn", |py| {
                        m.after_turn(py, &c.session_id, &c.text)
                    });
                } else {
                    m.session(&c.session_id, |s| s.recall.clear());
                }
                HookAction::Continue
            }
            (Part::SessionEnd, HookPayload::Session(c)) => {
                run(m, "on_session_end", |py| m.session_ended(py, &c.session_id));
                HookAction::Continue
            }
            _ => HookAction::Continue,
        };
        HookReturn::Ready(Ok(action))
    }
}

/// Run a part under the interpreter; plughost's own failures (a value
/// that does not convert) are logged like the provider's.
fn run(m: &ActiveMemory, what: &str, f: impl FnOnce(Python<'_>) -> PyResult<()>) {
    let outcome = try_attach(|py| f(py).map_err(|e| plugin_error(py, &e).described()));
    if let Ok(Err(e)) = outcome {
        tracing::warn!(
            "memory provider '{}' (plugin '{}'): {what} failed: {e}; the turn goes on",
            m.name,
            m.plugin
        );
    }
}

/// The host's memory provider, once one is active (one per host, as
/// Hermes's `MemoryManager` allows one external provider).
#[derive(Default)]
pub struct MemorySlot(
    Mutex<Option<(String, String)>>,
    /// The active provider, while something holds it.
    Mutex<Option<std::sync::Weak<ActiveMemory>>>,
);

impl MemorySlot {
    /// `(plugin, provider name)` of the active provider.
    pub fn active(&self) -> Option<(String, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// `ctx.register_memory_provider(provider)`: the lanes and tools that make
/// it the host's memory (what the context commits when loading succeeds);
/// empty, with a warning, for a provider Hermes would refuse; `None` for
/// one `memory.provider` does not name (registered, not used: a general
/// plugin's provider, as Hermes's plugin manager leaves it).
pub fn register(
    py: Python<'_>,
    plugin: &str,
    host: &Arc<Extensions>,
    home: &Path,
    provider: &Bound<'_, PyAny>,
) -> PyResult<Option<Vec<Registration>>> {
    let base = py
        .import("agent.memory_provider")?
        .getattr("MemoryProvider")?;
    let hermes_base = py
        .import("sys")?
        .getattr("modules")?
        .get_item("agent.memory_provider")
        .ok();
    let name = provider
        .getattr("name")
        .ok()
        .and_then(|n| n.extract::<String>().ok())
        .filter(|n| !n.trim().is_empty());
    let is_provider = provider.is_instance(&base)?
        || hermes_base
            .and_then(|m| m.getattr("MemoryProvider").ok())
            .is_some_and(|b| provider.is_instance(&b).unwrap_or(false));
    let Some(name) = name.filter(|_| is_provider) else {
        tracing::warn!("Plugin '{plugin}' tried to register a memory provider that is not a MemoryProvider with a name. Ignoring.");
        return Ok(Some(Vec::new()));
    };
    let tail = plugin.rsplit('/').next().unwrap_or(plugin);
    let wanted = configured(home);
    let states = host.get::<super::providers::ProviderStates>();
    if !wanted
        .as_ref()
        .is_some_and(|a| *a == name || a == plugin || a == tail)
    {
        let why = match wanted {
            Some(w) => format!("not active: memory.provider is '{w}'"),
            None => "not active: no memory.provider is set".to_string(),
        };
        states.record(plugin, "memory", &name, why);
        return Ok(None);
    }
    let slot = host.get::<MemorySlot>();
    {
        let mut active = slot.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((owner, other)) = active.as_ref() {
            tracing::warn!("Plugin '{plugin}' registered memory provider '{name}' but '{other}' (plugin '{owner}') is already active; Hermes allows one. Ignoring.");
            return Ok(Some(Vec::new()));
        }
        let available = provider
            .call_method0("is_available")
            .and_then(|a| a.is_truthy())
            .unwrap_or_else(|e| {
                tracing::warn!(
                    "memory provider '{name}': is_available() raised {}",
                    plugin_error(py, &e).described()
                );
                false
            });
        if !available {
            let why: String = provider
                .call_method0("unavailable_reason")
                .and_then(|r| r.extract())
                .unwrap_or_default();
            tracing::warn!(
                "memory provider '{name}' (plugin '{plugin}') is not available{}; not activated",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                }
            );
            return Ok(Some(Vec::new()));
        }
        *active = Some((plugin.to_string(), name.clone()));
    }
    states.record(plugin, "memory", &name, "active (memory.provider)".into());
    let memory = Arc::new(ActiveMemory {
        plugin: plugin.to_string(),
        name: name.clone(),
        provider: provider.clone().unbind(),
        sessions: Mutex::new(HashMap::new()),
        shut: Default::default(),
    });
    *slot.1.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(&memory));
    let mut out = super::lanes::provider_hooks(plugin, &name, LANES, |part| {
        Arc::new(MemoryHook {
            memory: Arc::clone(&memory),
            part,
        })
    });
    out.extend(tools(py, plugin, host, &memory)?);
    Ok(Some(out))
}

/// The provider's `get_tool_schemas()` as registry tools whose handler is
/// its `handle_tool_call` (read when it is activated: plughost's tool table
/// is fixed once the host is built).
fn tools(
    py: Python<'_>,
    plugin: &str,
    host: &Arc<Extensions>,
    memory: &ActiveMemory,
) -> PyResult<Vec<Registration>> {
    let Some(schemas) = memory.call(py, "get_tool_schemas", (), None) else {
        return Ok(Vec::new());
    };
    let schemas: Value = crate::runtime::value::to_json(&schemas).unwrap_or(Value::Null);
    super::provider_tools::ProviderTools {
        plugin,
        provider: &memory.provider,
        what: "memory provider",
        name: &memory.name,
        helper_module: "agent.memory_provider",
        toolset: TOOLSET,
    }
    .registrations(py, host, &schemas)
}

/// The configured memory provider: plughost's `config.json`
/// `memory.provider`, else Hermes's `config.yaml` `memory.provider`.
pub fn configured(home: &Path) -> Option<String> {
    let plughost = std::fs::read_to_string(crate::plugins::config::config_path(home))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    let hermes = std::fs::read_to_string(super::discover::hermes_home().join("config.yaml"))
        .ok()
        .and_then(|t| serde_saphyr::from_str::<Value>(&t).ok());
    [plughost, hermes]
        .into_iter()
        .flatten()
        .find_map(|doc| {
            doc.get("memory")?
                .get("provider")?
                .as_str()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
}

/// Hermes's cheap test of a memory provider directory (no import).
pub fn is_memory_dir(dir: &Path) -> bool {
    std::fs::read(dir.join("__init__.py")).is_ok_and(|b| {
        let head = String::from_utf8_lossy(&b[..b.len().min(8192)]).into_owned();
        head.contains("register_memory_provider") || head.contains("MemoryProvider")
    })
}

/// Memory-provider candidates, enabled by `memory.provider` alone: the one
/// it names (its directory name, key or manifest name) loads; the others
/// say how to select them. A `plugins.disabled` entry still wins.
pub fn select(home: &Path, mut found: Vec<Candidate>) -> Vec<Candidate> {
    let active = configured(home);
    for c in found.iter_mut() {
        // An explicit `kind:` other than exclusive wins over the sniffing.
        let exclusive = matches!(&c.manifest, Ok(m) if m.kind == PluginKind::Exclusive);
        if !exclusive || !is_memory_dir(&c.dir) || matches!(c.skip_reason, Some(Verdict::Disabled))
        {
            continue;
        }
        let dir_name = c
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let manifest_name = c.manifest.as_ref().map(|m| m.name.clone()).ok();
        let names = [Some(dir_name), Some(c.key.clone()), manifest_name];
        let chosen = active
            .as_ref()
            .is_some_and(|a| names.iter().flatten().any(|n| n == a));
        let active_text = match &active {
            Some(a) => format!("the active one is '{a}'"),
            None => "none is selected".to_string(),
        };
        let how = format!("select it with memory.provider: {} in Hermes's config.yaml, or \"memory\": {{\"provider\": \"{}\"}} in plughost's config.json", c.key, c.key);
        if chosen {
            c.enabled = true;
            c.skip_reason = match &c.manifest {
                Err(e) => Some(Verdict::Unloadable(e.clone())),
                Ok(_) => None,
            };
        } else if c.enabled {
            c.skip_reason = Some(Verdict::Unsupported(format!(
                "exclusive memory provider — Hermes runs the one memory.provider names ({active_text}); {how}"
            )));
        } else {
            c.skip_reason = Some(Verdict::NotEnabled(format!(
                "memory provider; {active_text} (Hermes runs one at a time); {how}"
            )));
        }
    }
    found
}

/// A memory provider with an explicit `kind: exclusive` in plughost's own
/// directories (put there by `plugins install`), which the directory rules
/// refuse as a kind they do not load: it loads as one without a `kind`
/// does there — when `plugins.enabled` lists it, made active when
/// `memory.provider` names it (`registrations`) — its files checked
/// against the lock file as any enabled user plugin's are.
pub fn admit_exclusive(c: &mut Candidate) {
    let exclusive = matches!(&c.manifest, Ok(m) if m.kind == PluginKind::Exclusive);
    // A Hermes home's are [`select`]ed by `memory.provider` alone.
    let hermes_home = c.dir.starts_with(super::discover::hermes_home());
    if c.missing || !exclusive || hermes_home || !is_memory_dir(&c.dir) {
        return;
    }
    match c.skip_reason {
        Some(Verdict::Unsupported(_)) if c.enabled => {
            c.skip_reason = None;
            crate::plugins::discovery::check_user_lock(c);
        }
        Some(Verdict::NotEnabled(_)) => {
            c.skip_reason = Some(Verdict::NotEnabled(format!(
                "not in plugins.enabled (run: plughost plugins enable {}); a memory provider, used when memory.provider names it",
                c.key
            )));
        }
        _ => {}
    }
}
