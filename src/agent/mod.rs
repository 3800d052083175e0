//! The agent loop: inbound messages → hooks, slash commands, model
//! iterations with concurrent tool calls, replies, sessions on disk.
//!
//! Where each of the 17 events fires:
//! - `pre_gateway_dispatch` — once per inbound message, before anything else
//!   (first skip drops it, first rewrite replaces its text).
//! - `on_session_start` — on a session key's first message.
//! - `pre_llm_call` — before each model iteration (context injection into the
//!   most recent user message; the stored transcript keeps the original).
//! - `pre_api_request` / `post_api_request` — around each provider call.
//! - `post_llm_call` — after each model reply (text, usage, truncated).
//! - `pre_tool_call` / `post_tool_call` / `transform_tool_result` — in every
//!   tool call's pipeline; `transform_terminal_output` on `exec` output
//!   before the post hooks.
//! - `on_session_end` — after every turn (`completed=False` when it failed,
//!   `interrupted=True` when it was cancelled).
//! - `on_session_reset` — `/new` and `/clear`.
//! - `on_session_finalize` — once per session, at shutdown or idle eviction.
//! - `subagent_stop` — when a `delegate` sub-agent finishes.
//! - `subagent_start` — when a `delegate` sub-agent starts.
//! - `transform_llm_output` — on the final reply of a turn (the first
//!   replacement is what the user gets; the transcript keeps the original).
//! - `api_request_error` — when a model call fails.
//!
//! The loop points other dialects map onto ([`HookEvent::LOOP_POINTS`]),
//! each fired after the seed events of the same place:
//! - P1 `input_received` — after `pre_gateway_dispatch`, before commands.
//! - P2c `compact_before` / `compact_failed` — `/compact`.
//! - P4 `history_ready` — once per turn, on the turn's in-flight list
//!   (system prompt first, then the transcript and the new user message):
//!   edits shape every model call of the turn, never the transcript.
//! - P5 `iteration_start` (appends) then `prompt_assemble` (edits) — before
//!   every model call, on the in-flight list (carried across iterations).
//! - P6 `prompt_final` — after `pre_llm_call`'s injection, on this call's copy.
//! - P7 `model_call_start` — after `pre_api_request`: model and params.
//! - P7e `model_call_error` — the provider failed (retry).
//! - P8 `model_replied` — after `post_llm_call`: the reply the loop acts on.
//! - P9 `tool_before`, `tool_vet`, P9x `tool_executing`, P10 `tool_after`,
//!   `tool_after_chain` — in the tool pipeline (see [`crate::core::pipeline`]).
//! - P11 `response_before_send` / P12 `response_persisted` — the final answer
//!   is buffered until P11 has had its say, then stored.
//! - P13 `turn_ended` — beside `on_session_end`, with `ended_by`.
//!
//! Every turn runs inside a [`TurnScope`] (the task-local
//! [`crate::core::hooks::CURRENT_TURN`]) that collects its hook errors and UI
//! events for the report.

mod commands;
pub mod link;
pub mod provider;
mod report;
pub mod session;
mod subagent;
pub mod tools;
mod turn;

pub use report::{
    AgentConfig, AgentEvent, Inbound, ModelCall, Timings, ToolCallRecord, TurnReport,
};

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::core::dispatch::{self, GatewayDecision};
use crate::core::hooks::{
    EndedBy, GatewayContext, HookEvent, InboundMessage, LoopContext, SessionContext, TurnScope,
    CURRENT_TURN,
};
use crate::core::loop_points::{self as points, Compaction};
use crate::host::Host;
use provider::Provider;
use session::{Session, SessionStore};
use tools::{DelegateSlot, SubagentRunner};

struct Inner {
    host: Arc<Host>,
    provider: Arc<dyn Provider>,
    sessions: SessionStore,
    config: AgentConfig,
    subagents: std::sync::atomic::AtomicU64,
    /// The last iteration's tool definitions and which tools they were
    /// made of, reused while the same tools are offered.
    tool_defs: std::sync::Mutex<Option<OfferedTools>>,
}

/// Which tools (their addresses) were offered, their definitions, and
/// their names as the report lists them.
type OfferedTools = (Vec<usize>, Arc<Vec<Value>>, Value);

/// The `function.name` of each tool definition.
fn tool_names(tools: &[Value]) -> Value {
    tools
        .iter()
        .map(|t| t["function"]["name"].clone())
        .collect()
}

/// The agent loop over a host's tools and hooks.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl Agent {
    /// An agent over `host`. Pass the [`DelegateSlot`] given to the `delegate`
    /// tool, if it was registered, so sub-agents can run.
    pub fn new(
        host: Arc<Host>,
        provider: Arc<dyn Provider>,
        config: AgentConfig,
        delegate: Option<&DelegateSlot>,
    ) -> Agent {
        let sessions = SessionStore::new(host.home().join("sessions"));
        // Hermes plugins reach the tools and model through their context.
        link::bind(&host, provider.clone());
        let inner = Arc::new(Inner {
            host,
            provider,
            sessions,
            config,
            subagents: Default::default(),
            tool_defs: Default::default(),
        });
        if let Some(slot) = delegate {
            // Same allocation as `inner`: upgradable exactly while the agent lives.
            let runner: Weak<dyn SubagentRunner> =
                Arc::downgrade(&inner) as Weak<dyn SubagentRunner>;
            slot.connect(runner);
        }
        Agent { inner }
    }

    pub fn host(&self) -> &Arc<Host> {
        &self.inner.host
    }

    pub fn sessions(&self) -> &SessionStore {
        &self.inner.sessions
    }

    /// Handle one inbound message (a whole turn).
    pub async fn send(
        &self,
        inbound: Inbound,
        events: Option<UnboundedSender<AgentEvent>>,
    ) -> TurnReport {
        self.inner
            .clone()
            .handle(inbound, events, None, std::future::pending())
            .await
    }

    /// Like [`send`](Self::send), but `cancel` completing stops the turn:
    /// running async tools are cancelled, open tool calls get the cancelled
    /// result, and `on_session_end` fires with `completed=False,
    /// interrupted=True` and runs to completion (each async hook bounded by
    /// the hook timeout). A turn cancelled before it had its session (still
    /// in `pre_gateway_dispatch`, or waiting for another turn) fires nothing.
    /// Once the turn's work is done, `cancel` is no longer watched: its
    /// `on_session_end` is never cut short.
    pub async fn send_cancellable(
        &self,
        inbound: Inbound,
        events: Option<UnboundedSender<AgentEvent>>,
        cancel: impl Future<Output = ()> + Send,
    ) -> TurnReport {
        self.inner
            .clone()
            .handle(inbound, events, None, cancel)
            .await
    }

    /// P0: the host starts serving. Call once, before the first turn, from
    /// a process that serves (`run`, `chat`).
    pub async fn start(&self) {
        dispatch::fire_host_start(&self.inner.host.registry()).await;
    }

    /// Fire `on_session_finalize` for sessions idle longer than `idle` and
    /// unload them.
    pub async fn evict_idle(&self, idle: Duration) -> usize {
        let mut evicted = 0;
        for session in self.inner.sessions.loaded() {
            let mut s = session.lock().await;
            if s.last_active.elapsed() >= idle && !s.finalized {
                self.inner
                    .fire_session(HookEvent::SessionClosing, &s, true, false)
                    .await;
                s.finalized = true;
                self.inner.sessions.unload(&s.key);
                evicted += 1;
            }
        }
        evicted
    }

    /// End session `key` now: `on_session_finalize` fires once (if the
    /// session ever started) and it is unloaded. For callers that own a
    /// session's lifetime, such as one HTTP request's conversation in
    /// `plughost serve`.
    pub async fn finalize_session(&self, key: &str) {
        let session = self.inner.sessions.get(key);
        let mut s = session.lock().await;
        if s.started && !s.finalized {
            self.inner
                .fire_session(HookEvent::SessionClosing, &s, true, false)
                .await;
            s.finalized = true;
        }
        self.inner.sessions.unload(key);
    }

    /// Fire `on_session_finalize` once for every session still loaded.
    pub async fn shutdown(&self) {
        for session in self.inner.sessions.loaded() {
            let mut s = session.lock().await;
            if !s.finalized {
                self.inner
                    .fire_session(HookEvent::SessionClosing, &s, true, false)
                    .await;
                s.finalized = true;
            }
        }
    }
}

/// How long `on_session_end` may run after a cancelled turn when the host
/// sets no hook timeout.
const END_HOOK_BOUND: Duration = Duration::from_secs(30);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Inner {
    fn model(&self) -> String {
        self.provider.model()
    }

    async fn fire_session(
        &self,
        event: HookEvent,
        session: &Session,
        completed: bool,
        interrupted: bool,
    ) {
        let ctx = || SessionContext {
            session_id: session.key.clone(),
            model: self.model(),
            platform: "plughost".into(),
            completed,
            interrupted,
            ..Default::default()
        };
        points::observe(&self.host.registry(), event, ctx).await;
    }

    /// A whole turn. `cancel` is watched until the turn's work is done (see
    /// [`Agent::send_cancellable`]); `std::future::pending()` never cancels.
    async fn handle(
        self: Arc<Self>,
        inbound: Inbound,
        events: Option<UnboundedSender<AgentEvent>>,
        tool_filter: Option<Vec<String>>,
        cancel: impl Future<Output = ()> + Send,
    ) -> TurnReport {
        let turn = Arc::new(TurnScope::default());
        let mut report = CURRENT_TURN
            .scope(
                turn.clone(),
                self.clone()
                    .handle_in_turn(inbound, events, tool_filter, cancel, turn.clone()),
            )
            .await;
        report.hook_errors =
            std::mem::take(&mut *turn.hook_errors.lock().unwrap_or_else(|e| e.into_inner()));
        if !report.hook_errors.is_empty() {
            let plugins = self.host.plugins();
            for record in &mut report.hook_errors {
                if let Some(p) = plugins.iter().find(|p| p.key == record.plugin) {
                    record.dialect = p.dialect.map(|d| d.to_string()).unwrap_or_default();
                }
            }
        }
        report.ui_events =
            std::mem::take(&mut *turn.ui_events.lock().unwrap_or_else(|e| e.into_inner()));
        report
    }

    async fn handle_in_turn(
        self: Arc<Self>,
        inbound: Inbound,
        events: Option<UnboundedSender<AgentEvent>>,
        tool_filter: Option<Vec<String>>,
        cancel: impl Future<Output = ()> + Send,
        turn: Arc<TurnScope>,
    ) -> TurnReport {
        let started = Instant::now();
        let delegate = inbound.channel == "delegate";
        let mut cancel = std::pin::pin!(cancel);
        let mut report = TurnReport {
            session_key: inbound.session_key.clone(),
            input: inbound.content.clone(),
            ..Default::default()
        };
        let finish = |mut report: TurnReport| {
            report.timings.total_ms = ms(started.elapsed());
            report
        };
        let cancelled = |mut report: TurnReport| {
            report.reply = Some("(turn cancelled)".into());
            report.interrupted = true;
            report.ended_by = EndedBy::Interrupted;
            finish(report)
        };

        // pre_gateway_dispatch and P1: once per inbound message, before session work.
        let admitted = tokio::select! {
            a = self.admit(&inbound, delegate, &turn) => a,
            _ = &mut cancel => return cancelled(report),
        };
        let content = match admitted {
            Admitted::Text(text) => text,
            Admitted::Skipped(reason) => {
                report.skipped = Some(reason);
                report.completed = true;
                report.ended_by = EndedBy::Skipped;
                return finish(report);
            }
        };

        // The session: this process's turns on it one at a time (its
        // mutex), other processes' too (the lock file), then what they
        // wrote read back and what a crash left repaired.
        let session = self.sessions.get(&inbound.session_key);
        let (mut session, _turn_lock) = tokio::select! {
            owned = self.own_session(&session) => match owned {
                Ok(owned) => owned,
                Err(e) => {
                    let e = e.to_string();
                    report.reply = Some(format!("Error: {e}"));
                    report.error = Some(e);
                    report.ended_by = EndedBy::Error;
                    return finish(report);
                }
            },
            _ = &mut cancel => return cancelled(report),
        };

        turn.attach_session(session.slots.clone());
        if let Some(line) = content.trim_start().strip_prefix('/') {
            report.command = true;
            tokio::select! {
                reply = self.command(&mut session, line) => report.reply = reply,
                _ = &mut cancel => return cancelled(report),
            }
            report.completed = true;
            report.ended_by = EndedBy::Command;
            return finish(report);
        }

        let work = async {
            if !session.started {
                session.started = true;
                self.fire_session(HookEvent::SessionOpened, &session, true, false)
                    .await;
            }
            let io = (events.as_ref(), tool_filter.as_deref());
            let mut t = turn::Turn::new(&mut session, &mut report, &content, io, (&turn, delegate));
            self.run_turn(&mut t).await
        };
        let outcome = tokio::select! {
            outcome = work => Some(outcome),
            _ = &mut cancel => None,
        };
        // From here on nothing is cancelled: the end of the turn always runs.
        match outcome {
            Some(outcome) => {
                self.end_completed(outcome, &session, &mut report, (&turn, delegate))
                    .await;
                finish(report)
            }
            None => {
                self.end_interrupted(&mut session, &mut report, (&turn, delegate))
                    .await;
                cancelled(report)
            }
        }
    }

    /// `pre_gateway_dispatch` (the first skip or rewrite wins), then P1
    /// (the inbound text, edited in place by the callbacks in turn).
    async fn admit(&self, inbound: &Inbound, delegate: bool, turn: &Arc<TurnScope>) -> Admitted {
        let registry = self.host.registry();
        let mut gateway = gateway_context(inbound);
        let mut content = inbound.content.clone();
        match dispatch::fire_gateway(&registry, &mut gateway).await {
            GatewayDecision::Skip(reason) => return Admitted::Skipped(reason),
            GatewayDecision::Rewrite(text) => content = text,
            GatewayDecision::Deliver => {}
        }
        let input = points::chain(&registry, HookEvent::InputReceived, || LoopContext {
            text: content.clone(),
            ..self.loop_context(&inbound.session_key, delegate, turn)
        });
        if let Some(lc) = input.await {
            content = lc.text;
        }
        Admitted::Text(content)
    }

    /// This process's hold on a session, then other processes' (bounded by
    /// `session_wait`), then memory brought up to date with the transcript.
    async fn own_session<'a>(
        &self,
        session: &'a tokio::sync::Mutex<Session>,
    ) -> Result<(tokio::sync::MutexGuard<'a, Session>, session::TurnLock), session::SessionError>
    {
        let mut guard = session.lock().await;
        let lock = guard.lock_turn(self.config.session_wait).await?;
        guard.resync()?;
        Ok((guard, lock))
    }

    async fn command(&self, session: &mut Session, line: &str) -> Option<String> {
        self.run_command_line(session, line).await
    }

    /// What the model is offered this iteration. The definitions are made
    /// again only when the offered tools changed (a check said otherwise):
    /// a copy of the last ones is cheaper than serialising every schema.
    fn tool_definitions(&self, filter: Option<&[String]>) -> Arc<Vec<Value>> {
        let registry = self.host.registry();
        let offered: Vec<&crate::core::registry::Tool> = registry
            .tools()
            .into_iter()
            .filter(|t| filter.is_none_or(|f| f.contains(&t.spec.name)))
            // A tool whose check_fn says no (or raises) is not offered this iteration.
            .filter(|t| matches!(t.handler.check(), None | Some(Ok(true))))
            .collect();
        let key: Vec<usize> = offered
            .iter()
            .map(|t| std::ptr::from_ref(*t) as usize)
            .collect();
        let mut cached = self.tool_defs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, defs, _)) = &*cached {
            if *seen == key {
                return defs.clone();
            }
        }
        let defs: Arc<Vec<Value>> = Arc::new(
            offered
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                    "name": t.spec.name, "description": t.spec.description, "parameters": t.spec.parameters}})
                })
                .collect(),
        );
        let names = tool_names(&defs);
        *cached = Some((key, defs.clone(), names));
        defs
    }

    /// The names of `tools` (definitions), as the report lists a call's
    /// tools: kept with the definitions [`Inner::tool_definitions`] made.
    fn offered_names(&self, tools: &Arc<Vec<Value>>) -> Value {
        let cached = self.tool_defs.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some((_, defs, names)) if Arc::ptr_eq(defs, tools) => names.clone(),
            _ => tool_names(tools),
        }
    }

    /// A loop point's context for this turn.
    fn loop_context(&self, session_id: &str, delegate: bool, turn: &Arc<TurnScope>) -> LoopContext {
        LoopContext {
            session_id: session_id.to_string(),
            delegate,
            model: self.model(),
            turn: Some(turn.clone()),
            ..Default::default()
        }
    }

    /// A context engine's compaction (P2c's replacement): the transcript
    /// becomes `messages`; a failed rewrite fires `compact_failed` as
    /// plughost's own compaction does.
    async fn replace_transcript(
        &self,
        session: &mut Session,
        messages: Vec<Value>,
    ) -> Option<String> {
        let before = session.messages.len();
        match session.replace_messages(messages) {
            Ok(()) => Some(format!(
                "Compacted the session with the context engine: {before} message(s) became {}.",
                session.messages.len()
            )),
            Err(e) => {
                let registry = self.host.registry();
                points::observe(&registry, HookEvent::CompactFailed, || LoopContext {
                    session_id: session.key.clone(),
                    error: Some(e.to_string()),
                    turn: crate::core::hooks::current_turn(),
                    ..Default::default()
                })
                .await;
                Some(format!("Error: could not compact the transcript: {e}"))
            }
        }
    }

    /// `/compact`: P2c may cancel it, supply a summary of what is dropped,
    /// or replace the whole transcript (a context engine).
    async fn compact(&self, session: &mut Session) -> Option<String> {
        let keep = self.config.compact_keep;
        let registry = self.host.registry();
        let Some(cut) = session.compaction_cut(keep) else {
            return Some("Nothing to compact.".into());
        };
        let context = || {
            let model_messages = session.model_messages();
            LoopContext {
                session_id: session.key.clone(),
                model: self.model(),
                messages: model_messages[..cut].to_vec(),
                kept: model_messages[cut..].to_vec(),
                turn: crate::core::hooks::current_turn(),
                ..Default::default()
            }
        };
        let summary = match points::compact_before(&registry, context).await {
            Compaction::Cancel => return Some("Compaction cancelled by a plugin.".into()),
            Compaction::Summary(text) => Some(
                json!({"role": "user", "content": format!("[Summary of the earlier conversation]\n{text}")}),
            ),
            Compaction::Proceed => None,
            Compaction::Replace(messages) => {
                return self.replace_transcript(session, messages).await
            }
        };
        match session.compact_with(keep, summary) {
            Ok(0) => Some("Nothing to compact.".into()),
            Ok(n) => Some(format!(
                "Compacted the session: dropped {n} older message(s), kept {}.",
                session.messages.len()
            )),
            Err(e) => {
                points::observe(&registry, HookEvent::CompactFailed, || LoopContext {
                    session_id: session.key.clone(),
                    error: Some(e.to_string()),
                    turn: crate::core::hooks::current_turn(),
                    ..Default::default()
                })
                .await;
                Some(format!("Error: could not compact the transcript: {e}"))
            }
        }
    }
}

/// `pre_gateway_dispatch`'s context of `inbound`.
fn gateway_context(inbound: &Inbound) -> GatewayContext {
    GatewayContext {
        session_id: inbound.session_key.clone(),
        event: InboundMessage {
            content: inbound.content.clone(),
            channel: inbound.channel.clone(),
            sender_id: inbound.sender_id.clone(),
            session_key: inbound.session_key.clone(),
            metadata: inbound.metadata.clone(),
        },
        gateway: inbound.channel.clone(),
        ..Default::default()
    }
}

/// What the inbound stages made of a message.
enum Admitted {
    /// The text the turn works on.
    Text(String),
    /// Dropped by `pre_gateway_dispatch`, with its reason.
    Skipped(String),
}
