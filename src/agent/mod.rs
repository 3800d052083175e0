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
//!   `tool_after_chain` — in the tool pipeline (see [`crate::core::dispatch`]).
//! - P11 `response_before_send` / P12 `response_persisted` — the final answer
//!   is buffered until P11 has had its say, then stored.
//! - P13 `turn_ended` — beside `on_session_end`, with `ended_by`.
//!
//! Every turn runs inside a [`TurnScope`] (the task-local
//! [`crate::core::hooks::CURRENT_TURN`]) that collects its hook errors and UI
//! events for the report.

pub mod provider;
pub mod session;
pub mod tools;

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::core::dispatch::{self, GatewayDecision, ToolMarks};
use crate::core::hooks::{
    BoxFuture, GatewayContext, HookErrorRecord, HookEvent, HookPayload, InboundMessage,
    LlmCallContext, LoopContext, LoopDecision, SessionContext, SubagentStopContext, TurnScope,
    CURRENT_TURN, MAX_MODEL_RETRIES,
};
use crate::core::outcome::{ArgumentProblem, ToolOutcome, ToolResult};
use crate::host::Host;
use provider::{ChatRequest, ChatResponse, Provider, ToolCallRequest};
use session::{Session, SessionStore};
use tools::{DelegateSlot, SubagentRunner};

/// How the loop behaves.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub system_prompt: String,
    /// Model iterations per turn before the loop gives up (default 25).
    pub max_iterations: usize,
    /// A tool call running longer is cancelled (async) or abandoned (sync).
    pub tool_timeout: Duration,
    /// Messages `/compact` keeps.
    pub compact_keep: usize,
    /// Tools a `delegate` sub-agent gets when the call names none.
    pub subagent_tools: Vec<String>,
    /// How long a turn waits for another process's turn on the same session
    /// to end before it is refused (default 30 s).
    pub session_wait: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            system_prompt:
                "You are a helpful agent. Use the tools when they help; keep answers short.".into(),
            max_iterations: 25,
            tool_timeout: Duration::from_secs(120),
            compact_keep: 8,
            subagent_tools: ["read_file", "write_file", "edit_file", "list_dir", "exec"]
                .map(String::from)
                .to_vec(),
            session_wait: Duration::from_secs(30),
        }
    }
}

/// What happens during a turn, for a live display.
#[derive(Clone, Debug)]
pub enum AgentEvent {
    TextDelta(String),
    ToolStarted {
        id: String,
        name: String,
        arguments: String,
    },
    ToolFinished {
        id: String,
        name: String,
        result: String,
        outcome: ToolOutcome,
    },
}

/// One tool call of a turn. In JSON, `outcome` is its kind (`ok`,
/// `raised`, `blocked`, …) and `details` the particulars: a plugin failure
/// with its type, message and traceback, a block's message, what is wrong
/// with the arguments.
#[derive(Clone, Debug)]
pub struct ToolCallRecord {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    pub result: String,
    pub outcome: ToolOutcome,
    pub duration_ms: f64,
}

impl Serialize for ToolCallRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ToolCallRecord", 7)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("arguments", &self.arguments)?;
        st.serialize_field("result", &self.result)?;
        st.serialize_field("outcome", &self.outcome)?;
        st.serialize_field("details", &self.outcome.details())?;
        st.serialize_field("duration_ms", &self.duration_ms)?;
        st.end()
    }
}

/// Where a turn's time went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    pub total_ms: f64,
    pub model_ms: f64,
    pub tools_ms: f64,
}

/// Everything about one turn (`plughost run --json` prints it).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TurnReport {
    pub session_key: String,
    pub input: String,
    /// The reply to show (None: skipped, or a command with no reply).
    pub reply: Option<String>,
    /// Why `pre_gateway_dispatch` dropped the message.
    pub skipped: Option<String>,
    /// The message was a slash command.
    pub command: bool,
    pub iterations: usize,
    pub tool_calls: Vec<ToolCallRecord>,
    /// Messages appended to the transcript this turn.
    pub messages: Vec<Value>,
    pub usage: Map<String, Value>,
    pub timings: Timings,
    pub completed: bool,
    pub interrupted: bool,
    /// The turn ended at the iteration cap without a final answer.
    pub hit_iteration_cap: bool,
    pub error: Option<String>,
    /// What each provider call was sent, after every hook, in order:
    /// `{iteration, model, params, messages, tools}` (OpenAI messages,
    /// system prompt first; tool names).
    pub model_calls: Vec<Value>,
    /// Every hook call of this turn that failed.
    pub hook_errors: Vec<HookErrorRecord>,
    /// The `abort_turn` reason, when a plugin aborted the turn.
    pub aborted: Option<String>,
    /// How the turn ended: `answer`, `short_circuit`, `aborted`,
    /// `tool_terminate`, `iteration_cap`, `skipped`, `command`, `error`,
    /// `interrupted`.
    pub ended_by: String,
    /// UI events plugins emitted (Codumentor's `ui_event_emitter`).
    pub ui_events: Vec<Value>,
}

/// An inbound message.
#[derive(Clone, Debug, Default)]
pub struct Inbound {
    pub content: String,
    pub channel: String,
    pub sender_id: String,
    pub session_key: String,
    pub metadata: Map<String, Value>,
}

impl Inbound {
    pub fn new(session_key: &str, content: &str) -> Inbound {
        Inbound {
            content: content.into(),
            channel: "cli".into(),
            sender_id: "user".into(),
            session_key: session_key.into(),
            ..Default::default()
        }
    }
}

struct Inner {
    host: Arc<Host>,
    provider: Arc<dyn Provider>,
    sessions: SessionStore,
    config: AgentConfig,
    subagents: std::sync::atomic::AtomicU64,
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
        crate::dialects::hermes::link::bind(&host, provider.clone());
        let inner = Arc::new(Inner {
            host,
            provider,
            sessions,
            config,
            subagents: Default::default(),
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
        dispatch::fire_host_start(self.inner.host.registry()).await;
    }

    /// Fire `on_session_finalize` for sessions idle longer than `idle` and
    /// unload them.
    pub async fn evict_idle(&self, idle: Duration) -> usize {
        let mut evicted = 0;
        for session in self.inner.sessions.loaded() {
            let mut s = session.lock().await;
            if s.last_active.elapsed() >= idle && !s.finalized {
                self.inner
                    .fire_session(HookEvent::OnSessionFinalize, &s, true, false)
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
                .fire_session(HookEvent::OnSessionFinalize, &s, true, false)
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
                    .fire_session(HookEvent::OnSessionFinalize, &s, true, false)
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
        let mut ctx = SessionContext {
            session_id: session.key.clone(),
            model: self.model(),
            platform: "plughost".into(),
            completed,
            interrupted,
            ..Default::default()
        };
        dispatch::fire(self.host.registry(), event, HookPayload::Session(&mut ctx)).await;
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
        let registry = self.host.registry();
        let finish = |mut report: TurnReport| {
            report.timings.total_ms = ms(started.elapsed());
            report
        };
        let cancelled = |mut report: TurnReport| {
            report.reply = Some("(turn cancelled)".into());
            report.interrupted = true;
            report.ended_by = "interrupted".into();
            finish(report)
        };

        // pre_gateway_dispatch: once per inbound message, before session work.
        let mut gateway = GatewayContext {
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
        };
        let mut content = inbound.content.clone();
        let decision = tokio::select! {
            d = dispatch::fire_gateway(registry, &mut gateway) => d,
            _ = &mut cancel => return cancelled(report),
        };
        match decision {
            GatewayDecision::Skip(reason) => {
                report.skipped = Some(reason);
                report.completed = true;
                report.ended_by = "skipped".into();
                return finish(report);
            }
            GatewayDecision::Rewrite(text) => content = text,
            GatewayDecision::Deliver => {}
        }
        // P1: the inbound text, edited in place by the callbacks in turn.
        if !registry
            .hooks()
            .entries(HookEvent::InputReceived)
            .is_empty()
        {
            let mut lc = self.loop_context(&inbound.session_key, delegate, &turn);
            lc.text = content.clone();
            tokio::select! {
                _ = dispatch::fire(registry, HookEvent::InputReceived, HookPayload::Loop(&mut lc)) => {}
                _ = &mut cancel => return cancelled(report),
            }
            content = lc.text;
        }

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
                    report.ended_by = "error".into();
                    return finish(report);
                }
            },
            _ = &mut cancel => return cancelled(report),
        };

        if let Some(line) = content.trim_start().strip_prefix('/') {
            report.command = true;
            tokio::select! {
                reply = self.command(&mut session, line) => report.reply = reply,
                _ = &mut cancel => return cancelled(report),
            }
            report.completed = true;
            report.ended_by = "command".into();
            return finish(report);
        }

        let work = async {
            if !session.started {
                session.started = true;
                self.fire_session(HookEvent::OnSessionStart, &session, true, false)
                    .await;
            }
            self.run_turn(
                &mut session,
                &content,
                &mut report,
                events.as_ref(),
                tool_filter.as_deref(),
                (&turn, delegate),
            )
            .await
        };
        let outcome = tokio::select! {
            outcome = work => Some(outcome),
            _ = &mut cancel => None,
        };
        // From here on nothing is cancelled: the end of the turn always runs.
        match outcome {
            Some(outcome) => {
                report.completed = outcome.is_ok();
                if let Err(e) = outcome {
                    report.reply = Some(format!("Error: {e}"));
                    report.error = Some(e);
                    report.ended_by = "error".into();
                }
                self.fire_session(HookEvent::OnSessionEnd, &session, report.completed, false)
                    .await;
                self.fire_turn_ended(&session.key, delegate, &turn, &report)
                    .await;
                finish(report)
            }
            None => {
                // The turn's futures are dropped: its async tools cancelled.
                // Its open calls get the result a cancelled call gets, so the
                // session's next request is valid.
                let renderer = registry.renderer();
                let text = |tool: &str| renderer.render(tool, &ToolOutcome::Cancelled);
                if let Err(e) = session.close_open_calls(&text) {
                    tracing::warn!(
                        "session '{}': cannot record the cancelled tool calls: {e} (the next turn repairs the transcript)",
                        session.key
                    );
                }
                self.fire_session_end_interrupted(&session).await;
                report.ended_by = "interrupted".into();
                let bounded = self.fire_turn_ended(&session.key, delegate, &turn, &report);
                if tokio::time::timeout(END_HOOK_BOUND, bounded).await.is_err() {
                    tracing::warn!("session '{}': turn_ended after a cancelled turn did not finish within {} s; stopped waiting", session.key, END_HOOK_BOUND.as_secs());
                }
                cancelled(report)
            }
        }
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

    /// `on_session_end(completed=False, interrupted=True)` after a cancel.
    /// Each async hook is bounded by the host's hook timeout; a host without
    /// one gets [`END_HOOK_BOUND`] for the whole event, so a cancelled turn
    /// always ends.
    async fn fire_session_end_interrupted(&self, session: &Session) {
        let fire = self.fire_session(HookEvent::OnSessionEnd, session, false, true);
        if self.host.registry().hook_timeout.is_some() {
            fire.await;
        } else if tokio::time::timeout(END_HOOK_BOUND, fire).await.is_err() {
            tracing::warn!(
                "session '{}': on_session_end after a cancelled turn did not finish within {} s; stopped waiting",
                session.key,
                END_HOOK_BOUND.as_secs()
            );
        }
    }

    async fn command(&self, session: &mut Session, line: &str) -> Option<String> {
        let word = line.split_whitespace().next().unwrap_or_default();
        let name = crate::core::registry::normalize_command_name(word);
        match name.as_str() {
            "new" | "clear" => {
                if let Err(e) = session.reset() {
                    return Some(format!("Error: could not archive the transcript: {e}"));
                }
                self.fire_session(HookEvent::OnSessionReset, session, true, false).await;
                Some("Started a new session.".into())
            }
            "compact" => self.compact(session).await,
            // `plugins doctor` of a fresh process has run no hook; here the
            // counts are this process's, turns of the session included.
            "plugins" if line.split_whitespace().nth(1) == Some("doctor") => {
                Some(crate::host::doctor::Report::new(&self.host).text())
            }
            "help" => Some(format!(
                "{}\n  /plugins doctor — the plugins doctor report, with this process's hook call counts\n  /new, /clear — start a new session\n  /compact — keep only the recent messages",
                self.host.help_text()
            )),
            _ => match self.host.run_command(&format!("/{line}")).await {
                Ok(reply) => reply,
                Err(crate::host::CommandError::Unknown(name)) => {
                    Some(format!("Unknown command /{name}. Type /help to see the commands."))
                }
                Err(e) => Some(format!("Error: {e}")),
            },
        }
    }

    fn tool_definitions(&self, filter: Option<&[String]>) -> Vec<Value> {
        self.host
            .registry()
            .tools()
            .into_iter()
            .filter(|t| filter.is_none_or(|f| f.contains(&t.spec.name)))
            // A tool whose check_fn says no (or raises) is not offered this iteration.
            .filter(|t| matches!(t.handler.check(), None | Some(Ok(true))))
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.spec.name, "description": t.spec.description, "parameters": t.spec.parameters}})
            })
            .collect()
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

    /// P13: the turn ended (its report says how).
    async fn fire_turn_ended(
        &self,
        session_id: &str,
        delegate: bool,
        turn: &Arc<TurnScope>,
        report: &TurnReport,
    ) {
        let registry = self.host.registry();
        if registry.hooks().entries(HookEvent::TurnEnded).is_empty() {
            return;
        }
        let mut lc = self.loop_context(session_id, delegate, turn);
        lc.ended_by = report.ended_by.clone();
        lc.reason = report.aborted.clone();
        lc.error = report.error.clone();
        lc.text = report.reply.clone().unwrap_or_default();
        lc.iteration = report.iterations;
        dispatch::fire(registry, HookEvent::TurnEnded, HookPayload::Loop(&mut lc)).await;
    }

    /// `/compact`: P2c may cancel it or supply a summary of what is dropped.
    async fn compact(&self, session: &mut Session) -> Option<String> {
        let keep = self.config.compact_keep;
        let registry = self.host.registry();
        let Some(cut) = session.compaction_cut(keep) else {
            return Some("Nothing to compact.".into());
        };
        let mut summary = None;
        let hooked = !registry
            .hooks()
            .entries(HookEvent::CompactBefore)
            .is_empty();
        if hooked {
            let model_messages = session.model_messages();
            let mut lc = LoopContext {
                session_id: session.key.clone(),
                model: self.model(),
                messages: model_messages[..cut].to_vec(),
                kept: model_messages[cut..].to_vec(),
                turn: crate::core::hooks::current_turn(),
                ..Default::default()
            };
            let answers = dispatch::fire(
                registry,
                HookEvent::CompactBefore,
                HookPayload::Loop(&mut lc),
            )
            .await;
            for decision in dispatch::decisions(answers, HookEvent::CompactBefore) {
                match decision {
                    LoopDecision::CancelCompaction => {
                        return Some("Compaction cancelled by a plugin.".into())
                    }
                    LoopDecision::Summary(text) => {
                        summary = Some(
                            json!({"role": "user", "content": format!("[Summary of the earlier conversation]\n{text}")}),
                        );
                        break;
                    }
                    other => tracing::warn!("compact_before: ignored {other:?}"),
                }
            }
        }
        match session.compact_with(keep, summary) {
            Ok(0) => Some("Nothing to compact.".into()),
            Ok(n) => Some(format!(
                "Compacted the session: dropped {n} older message(s), kept {}.",
                session.messages.len()
            )),
            Err(e) => {
                if !registry
                    .hooks()
                    .entries(HookEvent::CompactFailed)
                    .is_empty()
                {
                    let mut lc = LoopContext {
                        session_id: session.key.clone(),
                        error: Some(e.to_string()),
                        turn: crate::core::hooks::current_turn(),
                        ..Default::default()
                    };
                    dispatch::fire(
                        registry,
                        HookEvent::CompactFailed,
                        HookPayload::Loop(&mut lc),
                    )
                    .await;
                }
                Some(format!("Error: could not compact the transcript: {e}"))
            }
        }
    }

    async fn run_turn(
        self: &Arc<Self>,
        session: &mut Session,
        content: &str,
        report: &mut TurnReport,
        events: Option<&UnboundedSender<AgentEvent>>,
        tool_filter: Option<&[String]>,
        (turn, delegate): (&Arc<TurnScope>, bool),
    ) -> Result<(), String> {
        let registry = self.host.registry();
        let hooks = registry.hooks();
        let user = json!({"role": "user", "content": content});
        session
            .append(user.clone())
            .map_err(|e| format!("cannot write the transcript: {e}"))?;
        report.messages.push(user);

        // P4: the turn's in-flight list, system prompt first. Edits shape
        // every call of this turn; the transcript keeps the originals.
        let mut inflight = vec![json!({"role": "system", "content": self.config.system_prompt})];
        inflight.extend(session.model_messages());
        if !hooks.entries(HookEvent::HistoryReady).is_empty() {
            let mut lc = self.loop_context(&session.key, delegate, turn);
            lc.messages = std::mem::take(&mut inflight);
            let answers = dispatch::fire(
                registry,
                HookEvent::HistoryReady,
                HookPayload::Loop(&mut lc),
            )
            .await;
            inflight = lc.messages;
            if let Some(text) = short_circuit(answers, HookEvent::HistoryReady) {
                return self
                    .final_answer(
                        session,
                        report,
                        (turn, delegate),
                        text,
                        Value::Null,
                        "short_circuit",
                    )
                    .await;
            }
        }

        for iteration in 1..=self.config.max_iterations {
            report.iterations = iteration;
            // Messages Hermes plugins injected (ctx.inject_message) join here.
            for text in crate::dialects::hermes::link::take_injected() {
                let injected = json!({"role": "user", "content": text});
                session
                    .append(injected.clone())
                    .map_err(|e| format!("cannot write the transcript: {e}"))?;
                report.messages.push(injected.clone());
                inflight.push(injected);
            }
            // What this call offers: rebuilt every iteration, edited at P5 (Codumentor's `tools`).
            let offered = std::sync::Mutex::new(self.tool_definitions(tool_filter));
            let tools = || offered.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let point = |event: HookEvent, messages: Vec<Value>| {
                let mut lc = self.loop_context(&session.key, delegate, turn);
                lc.iteration = iteration;
                lc.messages = messages;
                lc.tools = tools();
                lc.stage = Some(event);
                lc
            };
            // P5: appends (every callback sees the same list), then edits; both carried.
            if !hooks.entries(HookEvent::IterationStart).is_empty() {
                let mut lc = point(HookEvent::IterationStart, inflight.clone());
                let answers = dispatch::fire(
                    registry,
                    HookEvent::IterationStart,
                    HookPayload::Loop(&mut lc),
                )
                .await;
                for decision in dispatch::decisions(answers, HookEvent::IterationStart) {
                    if let LoopDecision::Append(messages) = decision {
                        inflight.extend(messages);
                    }
                }
            }
            if !hooks.entries(HookEvent::PromptAssemble).is_empty() {
                let mut lc = point(HookEvent::PromptAssemble, std::mem::take(&mut inflight));
                dispatch::fire(
                    registry,
                    HookEvent::PromptAssemble,
                    HookPayload::Loop(&mut lc),
                )
                .await;
                inflight = lc.messages;
                *offered.lock().unwrap_or_else(|e| e.into_inner()) = lc.tools;
            }

            // P6: this call's copy (Flowly's injection, then the edits of this call only).
            let mut call_messages = inflight.clone();
            let (system, mut messages) = split_system(&call_messages);
            let mut llm = LlmCallContext {
                session_id: session.key.clone(),
                model: self.model(),
                messages: messages.clone(),
                tools: tools(),
                system: system.clone(),
                user_message: content.to_string(),
                ..Default::default()
            };
            let injected = dispatch::fire_pre_llm(registry, &mut llm).await;
            if !injected.is_empty() {
                if let Some(last_user) = messages.iter_mut().rev().find(|m| m["role"] == "user") {
                    let original = last_user["content"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    last_user["content"] =
                        Value::String(dispatch::inject_context(&original, &injected));
                }
                call_messages = join_system(&system, messages);
            }
            if !hooks.entries(HookEvent::PromptFinal).is_empty() {
                let mut lc = point(HookEvent::PromptFinal, call_messages);
                let answers =
                    dispatch::fire(registry, HookEvent::PromptFinal, HookPayload::Loop(&mut lc))
                        .await;
                call_messages = lc.messages;
                // Appends reach this call and are carried to later iterations.
                for decision in dispatch::decisions(answers, HookEvent::PromptFinal) {
                    if let LoopDecision::Append(messages) = decision {
                        call_messages.extend(messages.iter().cloned());
                        inflight.extend(messages);
                    }
                }
            }
            let call_messages: Vec<Value> = call_messages.iter().map(wire_message).collect();
            let (system, messages) = split_system(&call_messages);
            let mut request = ChatRequest {
                model: self.model(),
                system,
                messages,
                tools: tools(),
                session_key: session.key.clone(),
                params: Map::new(),
            };
            let mut api = LlmCallContext {
                messages: request.messages.clone(),
                ..llm_base(&llm)
            };
            dispatch::fire(
                registry,
                HookEvent::PreApiRequest,
                HookPayload::Llm(&mut api),
            )
            .await;
            // P7: the model and parameters of this call.
            let mut params = Map::new();
            if !hooks.entries(HookEvent::ModelCallStart).is_empty() {
                let mut lc = point(HookEvent::ModelCallStart, call_messages.clone());
                dispatch::fire(
                    registry,
                    HookEvent::ModelCallStart,
                    HookPayload::Loop(&mut lc),
                )
                .await;
                if !lc.model.is_empty() {
                    request.model = lc.model;
                }
                params = lc.params;
                request.params = params.clone();
            }
            report.model_calls.push(json!({
                "iteration": iteration,
                "model": request.model,
                "params": params,
                "messages": call_messages,
                "tools": request.tools.iter().map(|t| t["function"]["name"].clone()).collect::<Vec<_>>(),
            }));

            let model_started = Instant::now();
            let mut retries = 0;
            let response = loop {
                let (delta_tx, relay) = relay_deltas(events.cloned());
                let response = self.provider.complete(request.clone(), delta_tx).await;
                drop(relay);
                let error = match response {
                    Ok(r) => break Ok(r),
                    Err(e) => e.to_string(),
                };
                // P7e: a callback may ask for the call again (bounded).
                if retries >= MAX_MODEL_RETRIES
                    || hooks.entries(HookEvent::ModelCallError).is_empty()
                {
                    break Err(error);
                }
                let mut lc = point(HookEvent::ModelCallError, call_messages.clone());
                lc.model = request.model.clone();
                lc.params = params.clone();
                lc.error = Some(error.clone());
                let answers = dispatch::fire(
                    registry,
                    HookEvent::ModelCallError,
                    HookPayload::Loop(&mut lc),
                )
                .await;
                let retry = dispatch::decisions(answers, HookEvent::ModelCallError)
                    .into_iter()
                    .find_map(|d| match d {
                        LoopDecision::RetryModelCall { delay_ms } => Some(delay_ms),
                        _ => None,
                    });
                let Some(delay_ms) = retry else {
                    break Err(error);
                };
                retries += 1;
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            };
            report.timings.model_ms += ms(model_started.elapsed());
            let mut response: ChatResponse = match response {
                Ok(r) => r,
                Err(e) => {
                    let mut failed = LlmCallContext {
                        response: json!({"error": e}),
                        ..llm_base(&api)
                    };
                    dispatch::fire(
                        registry,
                        HookEvent::ApiRequestError,
                        HookPayload::Llm(&mut failed),
                    )
                    .await;
                    return Err(format!("model call failed: {e}"));
                }
            };
            for (k, v) in &response.usage {
                let sum = report.usage.get(k).and_then(Value::as_f64).unwrap_or(0.0)
                    + v.as_f64().unwrap_or(0.0);
                report.usage.insert(k.clone(), json!(sum));
            }

            // Each event gets its own context: a hook's edits to one never leak into the next.
            let mut post_api = answered(&api, &response);
            dispatch::fire(
                registry,
                HookEvent::PostApiRequest,
                HookPayload::Llm(&mut post_api),
            )
            .await;
            let mut post_llm = answered(&api, &response);
            dispatch::fire(
                registry,
                HookEvent::PostLlmCall,
                HookPayload::Llm(&mut post_llm),
            )
            .await;

            let mut assistant = json!({"role": "assistant", "content": response.text});
            if !response.tool_calls.is_empty() {
                assistant["tool_calls"] = response
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            // P8: the reply the loop records and acts on, tool calls included.
            if !hooks.entries(HookEvent::ModelReplied).is_empty() {
                let mut lc = point(HookEvent::ModelReplied, call_messages.clone());
                lc.model = request.model.clone();
                lc.reply = assistant.clone();
                lc.stop_reason = if response.truncated {
                    "length"
                } else if response.tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                }
                .into();
                lc.usage = response.usage.clone();
                let answers = dispatch::fire(
                    registry,
                    HookEvent::ModelReplied,
                    HookPayload::Loop(&mut lc),
                )
                .await;
                if let Some(text) = short_circuit(answers, HookEvent::ModelReplied) {
                    // The model's reply is discarded, its tool calls too.
                    return self
                        .final_answer(
                            session,
                            report,
                            (turn, delegate),
                            text,
                            Value::Null,
                            "short_circuit",
                        )
                        .await;
                }
                if lc.reply != assistant {
                    response = reply_as_response(&lc.reply, response);
                    assistant = wire_message(&lc.reply);
                    assistant["role"] = json!("assistant");
                }
            }

            if response.tool_calls.is_empty() {
                self.final_answer(
                    session,
                    report,
                    (turn, delegate),
                    response.text,
                    assistant,
                    "answer",
                )
                .await?;
                // transform_llm_output (Hermes): the first replacement is
                // what the user gets; the transcript keeps what was stored.
                if let Some(reply) = report.reply.clone() {
                    let mut out = LlmCallContext {
                        assistant_message: reply,
                        ..llm_base(&api)
                    };
                    let replaced = dispatch::fire(
                        registry,
                        HookEvent::TransformLlmOutput,
                        HookPayload::Llm(&mut out),
                    )
                    .await
                    .into_iter()
                    .find_map(|a| match a {
                        crate::core::hooks::HookAction::Replace(text) => Some(text),
                        _ => None,
                    });
                    if let Some(text) = replaced {
                        report.reply = Some(text);
                    }
                }
                return Ok(());
            }
            session
                .append(assistant.clone())
                .map_err(|e| format!("cannot write the transcript: {e}"))?;
            report.messages.push(assistant.clone());
            inflight.push(assistant);

            let tools_started = Instant::now();
            let calls = response.tool_calls.iter().map(|call| {
                self.run_tool(call, &session.key, events, tool_filter, (turn, delegate))
            });
            let results = futures_util::future::join_all(calls).await;
            report.timings.tools_ms += ms(tools_started.elapsed());
            let mut all_terminate = true;
            let mut abort = None;
            let mut short_circuit = None;
            let mut inserted = Vec::new();
            let mut fatal = false;
            for (call, (record, marks)) in response.tool_calls.iter().zip(results) {
                let message = json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": record.result});
                session
                    .append(message.clone())
                    .map_err(|e| format!("cannot write the transcript: {e}"))?;
                report.messages.push(message.clone());
                inflight.push(message);
                report.tool_calls.push(record);
                all_terminate &= marks.terminate;
                if abort.is_none() {
                    abort = marks.abort;
                }
                if short_circuit.is_none() {
                    short_circuit = marks.short_circuit;
                }
                inserted.extend(marks.insert);
                fatal |= marks.fatal;
            }
            // After every result of the batch (a tool message must follow its call).
            inflight.extend(inserted);
            if let Some((reason, text)) = abort {
                // The abort's answer is stored, so the transcript shows how the turn ended.
                let message = json!({"role": "assistant", "content": text});
                session
                    .append(message.clone())
                    .map_err(|e| format!("cannot write the transcript: {e}"))?;
                report.messages.push(message);
                report.reply = Some(text);
                report.aborted = Some(reason);
                report.ended_by = "aborted".into();
                return Ok(());
            }
            if let Some(text) = short_circuit {
                return self
                    .final_answer(
                        session,
                        report,
                        (turn, delegate),
                        text,
                        Value::Null,
                        "short_circuit",
                    )
                    .await;
            }
            // A fatal failure ends the turn as every call terminating does
            // (Felix's react loop: `had_fatal`, then `all_terminate`).
            if all_terminate || fatal {
                report.reply = Some(response.text);
                report.ended_by = "tool_terminate".into();
                return Ok(());
            }
        }
        let cap = self.config.max_iterations;
        report.hit_iteration_cap = true;
        report.ended_by = "iteration_cap".into();
        report.reply = Some(format!(
            "Stopped after {cap} model iterations without a final answer (the iteration cap; raise it with --max-iterations)."
        ));
        Ok(())
    }

    /// The final answer: P11 may revise it, then it is stored (a revision
    /// included) and P12 sees what was stored.
    async fn final_answer(
        &self,
        session: &mut Session,
        report: &mut TurnReport,
        (turn, delegate): (&Arc<TurnScope>, bool),
        text: String,
        reply: Value,
        ended_by: &str,
    ) -> Result<(), String> {
        let registry = self.host.registry();
        let hooks = registry.hooks();
        let mut message = if reply.is_null() {
            json!({"role": "assistant", "content": text})
        } else {
            reply
        };
        let mut text = text;
        if !hooks.entries(HookEvent::ResponseBeforeSend).is_empty() {
            let mut lc = self.loop_context(&session.key, delegate, turn);
            lc.iteration = report.iterations;
            lc.text = text.clone();
            lc.reply = message.clone();
            dispatch::fire(
                registry,
                HookEvent::ResponseBeforeSend,
                HookPayload::Loop(&mut lc),
            )
            .await;
            if lc.text != text {
                text = lc.text;
                message["content"] = json!(text);
            }
        }
        session
            .append(message.clone())
            .map_err(|e| format!("cannot write the transcript: {e}"))?;
        report.messages.push(message.clone());
        if !hooks.entries(HookEvent::ResponsePersisted).is_empty() {
            let mut lc = self.loop_context(&session.key, delegate, turn);
            lc.iteration = report.iterations;
            lc.text = text.clone();
            lc.reply = message;
            dispatch::fire(
                registry,
                HookEvent::ResponsePersisted,
                HookPayload::Loop(&mut lc),
            )
            .await;
        }
        report.reply = Some(text);
        report.ended_by = ended_by.into();
        Ok(())
    }

    /// One tool call: parsed, then the full dispatch pipeline on a blocking
    /// thread so a sync handler that overruns can be abandoned.
    async fn run_tool(
        &self,
        call: &ToolCallRequest,
        session_key: &str,
        events: Option<&UnboundedSender<AgentEvent>>,
        filter: Option<&[String]>,
        (turn, delegate): (&Arc<TurnScope>, bool),
    ) -> (ToolCallRecord, ToolMarks) {
        if let Some(tx) = events {
            let _ = tx.send(AgentEvent::ToolStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let started = Instant::now();
        let parsed = if call.arguments.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str::<Value>(&call.arguments)
        };
        let arguments = parsed.as_ref().cloned().unwrap_or(Value::Null);
        let mut marks = ToolMarks::default();
        let result = if parsed.is_err() {
            self.refused(
                &call.name,
                ToolOutcome::InvalidArguments {
                    problem: ArgumentProblem::NotJson,
                },
            )
        } else if filter.is_some_and(|f| !f.contains(&call.name)) {
            self.refused(&call.name, ToolOutcome::NotFound)
        } else {
            let (result, m) = self
                .dispatch_with_timeout(call, arguments.clone(), session_key, (turn, delegate))
                .await;
            marks = m;
            result
        };
        if let Some(tx) = events {
            let _ = tx.send(AgentEvent::ToolFinished {
                id: call.id.clone(),
                name: call.name.clone(),
                result: result.text.clone(),
                outcome: result.outcome.clone(),
            });
        }
        let record = ToolCallRecord {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments,
            result: result.text,
            outcome: result.outcome,
            duration_ms: ms(started.elapsed()),
        };
        (record, marks)
    }

    async fn dispatch_with_timeout(
        &self,
        call: &ToolCallRequest,
        arguments: Value,
        session_key: &str,
        (turn, delegate): (&Arc<TurnScope>, bool),
    ) -> (ToolResult, ToolMarks) {
        let host = self.host.clone();
        let turn = turn.clone();
        let (name, id, key) = (call.name.clone(), call.id.clone(), session_key.to_string());
        let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Handle::current();
        let job = tokio::task::spawn_blocking(move || {
            runtime.block_on(CURRENT_TURN.scope(turn.clone(), async move {
                tokio::select! {
                    r = dispatch::call_tool_in_turn(host.registry(), &name, arguments, &key, &id, Some((turn, delegate))) => Some(r),
                    _ = cancel_rx => None,
                }
            }))
        });
        let limit = self.config.tool_timeout;
        match tokio::time::timeout(limit, job).await {
            Ok(Ok(Some(r))) => (r.result, r.marks),
            Ok(_) => (
                self.refused(&call.name, ToolOutcome::Cancelled),
                ToolMarks::default(),
            ),
            Err(_) => {
                drop(cancel_tx); // cancels an async handler; a sync one is abandoned
                (
                    self.refused(&call.name, ToolOutcome::TimedOut { after: limit }),
                    ToolMarks::default(),
                )
            }
        }
    }

    /// A call that ended without reaching (or finishing) the pipeline,
    /// rendered as the host renders every outcome.
    fn refused(&self, tool: &str, outcome: ToolOutcome) -> ToolResult {
        ToolResult {
            text: self.host.registry().renderer().render(tool, &outcome),
            outcome,
        }
    }
}

/// The system prompt (a leading `system` message's content; empty when a
/// hook removed it) and the rest of a message list.
fn split_system(messages: &[Value]) -> (String, Vec<Value>) {
    match messages.first() {
        Some(first) if first["role"] == "system" => (
            first["content"].as_str().unwrap_or_default().to_string(),
            messages[1..].to_vec(),
        ),
        _ => (String::new(), messages.to_vec()),
    }
}

fn join_system(system: &str, messages: Vec<Value>) -> Vec<Value> {
    let mut all = vec![json!({"role": "system", "content": system})];
    all.extend(messages);
    all
}

/// A message as the provider is sent it: OpenAI fields only (no `ts`,
/// `metadata` or other fields a hook or the transcript added).
fn wire_message(message: &Value) -> Value {
    const FIELDS: [&str; 5] = ["role", "content", "tool_calls", "tool_call_id", "name"];
    match message.as_object() {
        Some(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| {
                    FIELDS.contains(&k.as_str()) && !(k.as_str() == "tool_calls" && v.is_null())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        None => message.clone(),
    }
}

/// The text of the first `short_circuit` among a point's answers: the
/// turn ends with it as the answer.
fn short_circuit(answers: Vec<crate::core::hooks::HookAction>, event: HookEvent) -> Option<String> {
    dispatch::decisions(answers, event)
        .into_iter()
        .find_map(|d| match d {
            LoopDecision::ShortCircuit(text) => Some(text),
            _ => None,
        })
}

/// The provider's response as a P8 replacement of the reply left it.
fn reply_as_response(reply: &Value, mut response: ChatResponse) -> ChatResponse {
    response.text = reply["content"].as_str().unwrap_or_default().to_string();
    response.tool_calls = reply["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCallRequest {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    response
}

fn llm_base(c: &LlmCallContext) -> LlmCallContext {
    LlmCallContext {
        session_id: c.session_id.clone(),
        task_id: c.task_id.clone(),
        model: c.model.clone(),
        messages: c.messages.clone(),
        tools: c.tools.clone(),
        system: c.system.clone(),
        user_message: c.user_message.clone(),
        ..Default::default()
    }
}

/// The context of the events after a model reply.
fn answered(base: &LlmCallContext, response: &ChatResponse) -> LlmCallContext {
    LlmCallContext {
        response: serde_json::to_value(response).unwrap_or_default(),
        assistant_message: response.text.clone(),
        usage: response.usage.clone(),
        truncated: response.truncated,
        ..llm_base(base)
    }
}

/// A channel for text deltas that forwards them as [`AgentEvent`]s.
fn relay_deltas(
    events: Option<UnboundedSender<AgentEvent>>,
) -> (
    Option<UnboundedSender<String>>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let Some(events) = events else {
        return (None, None);
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let relay = tokio::spawn(async move {
        while let Some(delta) = rx.recv().await {
            let _ = events.send(AgentEvent::TextDelta(delta));
        }
    });
    (Some(tx), Some(relay))
}

impl SubagentRunner for Inner {
    fn run(
        &self,
        parent_session: String,
        task: String,
        tools: Option<Vec<String>>,
    ) -> BoxFuture<Result<String, String>> {
        // The loop runs on an `Arc<Inner>`; a sub-agent gets its own, over the
        // same host, provider and config, with its own session store.
        let inner = Arc::new(Inner {
            host: self.host.clone(),
            provider: self.provider.clone(),
            sessions: SessionStore::new(self.sessions.dir().to_path_buf()),
            config: self.config.clone(),
            subagents: Default::default(),
        });
        // A fresh transcript for every call, unique across processes sharing
        // the home: a new process never resumes an old sub-agent conversation.
        let from = self.subagents.load(std::sync::atomic::Ordering::Relaxed) + 1;
        let claimed = self.sessions.claim_subagent_key(&parent_session, from);
        if let Ok((_, n)) = &claimed {
            self.subagents
                .fetch_max(*n, std::sync::atomic::Ordering::Relaxed);
        }
        let allowed: Vec<String> = tools
            .unwrap_or_else(|| self.config.subagent_tools.clone())
            .into_iter()
            .filter(|t| t != "delegate")
            .collect();
        Box::pin(async move {
            let key = match claimed {
                Ok((key, _)) => key,
                Err(e) => {
                    return Err(format!(
                        "cannot start a sub-agent: cannot create its transcript in {}: {e}",
                        inner.sessions.dir().display()
                    ))
                }
            };
            let mut start = SubagentStopContext {
                session_id: parent_session.clone(),
                subagent_id: key.clone(),
                goal: task.clone(),
                ..Default::default()
            };
            dispatch::fire(
                inner.host.registry(),
                HookEvent::SubagentStart,
                HookPayload::Subagent(&mut start),
            )
            .await;
            let goal = task.clone();
            let inbound = Inbound {
                content: task,
                channel: "delegate".into(),
                sender_id: parent_session.clone(),
                session_key: key.clone(),
                ..Default::default()
            };
            let report = inner
                .clone()
                .handle(inbound, None, Some(allowed), std::future::pending())
                .await;
            let reason = if report.error.is_some() {
                "error"
            } else if report.hit_iteration_cap {
                "max_iterations"
            } else {
                "completed"
            };
            let mut ctx = SubagentStopContext {
                session_id: parent_session,
                subagent_id: key,
                reason: reason.into(),
                goal,
                ..Default::default()
            };
            dispatch::fire(
                inner.host.registry(),
                HookEvent::SubagentStop,
                HookPayload::Subagent(&mut ctx),
            )
            .await;
            match report.error {
                Some(e) => Err(format!("the sub-agent failed: {e}")),
                None => Ok(report.reply.unwrap_or_default()),
            }
        })
    }
}
