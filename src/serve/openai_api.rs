//! `POST /v1/chat/completions` and `GET /v1/models`: the agent loop behind
//! the OpenAI Chat Completions API.
//!
//! The request's messages are the conversation: all but the last are
//! written as the transcript of a fresh session of this request, the last
//! (the user's) is the turn's input, and the agent loop runs it with the
//! plugins' tools and hooks; the session is finalized and its transcript
//! removed when the turn ends. With an `X-Plughost-Session: NAME` header
//! the named persistent session is the conversation instead (its
//! transcript, its session hooks) and only the last message is taken from
//! the request. The `model` field is accepted whatever it says; the server
//! answers with the model it was started with.
//!
//! Streaming (`"stream": true`) sends the assistant's text as it is made,
//! from every model iteration of the turn (the steps before tool calls
//! too, separated by a blank line); the non-streamed answer is the final
//! message only. `usage` sums what the model reported over the turn's
//! iterations (zeros for a model that reports none, like the scripted one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::idle::{InUse, NamedSessions, DEFAULT_SESSION_IDLE};
use super::metrics::Metrics;
use super::replicas::Prepared;
use crate::agent::provider::{ChatRequest, ChatResponse, Provider, ProviderError, StreamEvent};
use crate::agent::{Agent, AgentEvent, Inbound, TurnReport};
use crate::core::hooks::BoxFuture;

/// A provider that marks the start of every streamed model call
/// ([`StreamEvent::IterationStart`]), so the streamed text of two
/// iterations can be told apart (tool events arrive on another path,
/// unordered with the text).
pub struct IterationMarks(Arc<dyn Provider>);

impl IterationMarks {
    pub fn wrap(inner: Arc<dyn Provider>) -> Arc<dyn Provider> {
        Arc::new(IterationMarks(inner))
    }
}

impl Provider for IterationMarks {
    fn model(&self) -> String {
        self.0.model()
    }

    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<tokio::sync::mpsc::UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        if let Some(tx) = &stream {
            let _ = tx.send(StreamEvent::IterationStart);
        }
        self.0.complete(request, stream)
    }
}

/// The header naming a persistent session.
pub const SESSION_HEADER: &str = "x-plughost-session";

/// What the chat endpoints share.
pub struct ChatState {
    pub agent: Agent,
    pub metrics: Arc<Metrics>,
    /// The model id answered and listed (`plughost:<model spec>`).
    pub model_id: String,
    /// Cancelled when the server's grace period after a shutdown signal
    /// ends: turns still running then are cancelled.
    pub turns_cancel: CancellationToken,
    /// The named sessions requests used, evicted when idle.
    pub named: Arc<NamedSessions>,
    next: AtomicU64,
    /// This process's part of every completion id: random (the standard
    /// library's OS-seeded hasher keys), so two replicas never answer the
    /// same id (`chatcmpl-1` on each before).
    id_prefix: String,
    /// This replica's cluster (leases, idempotency, fingerprint); set once at start.
    pub replicas: std::sync::OnceLock<super::replicas::Replicas>,
}

/// 16 random hex digits: a `RandomState`'s keys come from the operating
/// system's random source, once per process.
fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

impl ChatState {
    pub fn new(
        agent: Agent,
        metrics: Arc<Metrics>,
        model_id: String,
        turns_cancel: CancellationToken,
    ) -> ChatState {
        ChatState {
            agent,
            metrics,
            model_id,
            turns_cancel,
            named: Arc::new(NamedSessions::new(Some(DEFAULT_SESSION_IDLE))),
            next: AtomicU64::new(1),
            id_prefix: random_hex(),
            replicas: std::sync::OnceLock::new(),
        }
    }

    /// Evict named sessions unused for `idle` (`None`: never); the default
    /// is [`DEFAULT_SESSION_IDLE`].
    pub fn with_session_idle(mut self, idle: Option<Duration>) -> ChatState {
        self.named = Arc::new(NamedSessions::new(idle));
        self
    }
}

/// An error in the OpenAI shape: `{"error": {"message", "type", "code"}}`.
pub fn error(status: StatusCode, kind: &str, code: &str, message: impl Into<String>) -> Response {
    let body =
        json!({"error": {"message": message.into(), "type": kind, "param": null, "code": code}});
    (status, Json(body)).into_response()
}

fn bad_request(message: impl Into<String>) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        "invalid_request",
        message,
    )
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Arc<ChatState>>) -> Response {
    Json(json!({"object": "list", "data": [
        {"id": state.model_id, "object": "model", "created": 0, "owned_by": "plughost"}
    ]}))
    .into_response()
}

/// A message's content as text: a string, null, or text parts.
fn content_text(index: usize, message: &Value) -> Result<String, String> {
    match message.get("content") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    (kind, _) => {
                        return Err(format!(
                            "messages[{index}].content has a part of type {}: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported",
                            kind.map(|k| format!("'{k}'")).unwrap_or_else(|| "(none)".into())
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(format!(
            "messages[{index}].content must be a string, null, or a list of text parts"
        )),
    }
}

/// The request, checked: the history (transcript form) and the user's last
/// message.
struct Conversation {
    history: Vec<Value>,
    input: String,
    stream: bool,
    include_usage: bool,
    user: Option<String>,
}

fn parse_request(body: &[u8]) -> Result<Conversation, String> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the request body is not valid JSON (line {}, column {}): {e}",
            e.line(),
            e.column()
        )
    })?;
    let Some(request) = request.as_object() else {
        return Err("the request body must be a JSON object with \"messages\"".into());
    };
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return Err("\"messages\" is required: a list of {\"role\", \"content\"} objects ending with the user's message".into());
    };
    let stream = match request.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("\"stream\" must be true or false".into()),
    };
    let include_usage = request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let user = request
        .get("user")
        .and_then(Value::as_str)
        .map(String::from);
    let mut history = Vec::with_capacity(messages.len());
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).ok_or_else(|| {
            format!("messages[{i}] needs a \"role\" (system, user, assistant or tool)")
        })?;
        let role = match role {
            "developer" => "system",
            "system" | "user" | "assistant" | "tool" => role,
            other => {
                return Err(format!(
                "messages[{i}] has role '{other}': use system, developer, user, assistant or tool"
            ))
            }
        };
        let mut entry = Map::new();
        entry.insert("role".into(), json!(role));
        entry.insert("content".into(), json!(content_text(i, message)?));
        for field in ["tool_calls", "tool_call_id", "name"] {
            if let Some(v) = message.get(field).filter(|v| !v.is_null()) {
                entry.insert(field.into(), v.clone());
            }
        }
        if role == "tool" && !entry.contains_key("tool_call_id") {
            return Err(format!(
                "messages[{i}] (role tool) needs the \"tool_call_id\" of the call it answers"
            ));
        }
        history.push(Value::Object(entry));
    }
    match history.pop() {
        Some(last) if last["role"] == "user" => Ok(Conversation {
            input: last["content"].as_str().unwrap_or_default().to_string(),
            history,
            stream,
            include_usage,
            user,
        }),
        Some(last) => Err(format!(
            "the last message must be the user's (role \"user\"), not '{}': plughost runs the agent loop, tools included, on it",
            last["role"].as_str().unwrap_or_default()
        )),
        None => Err("\"messages\" is empty: send at least the user's message".into()),
    }
}

fn session_name(headers: &HeaderMap) -> Result<Option<String>, String> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let name = value
        .to_str()
        .map_err(|_| "the X-Plughost-Session header must be printable ASCII".to_string())?
        .trim();
    if name.is_empty() || name.len() > 200 {
        return Err(
            "the X-Plughost-Session header must name a session (1 to 200 characters)".into(),
        );
    }
    crate::agent::session::check_name(name)
        .map_err(|e| format!("the X-Plughost-Session header: {e}"))?;
    Ok(Some(name.to_string()))
}

/// The OpenAI `usage` object.
#[derive(serde::Serialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// The OpenAI `usage` object from a turn's summed usage.
fn usage(report: &TurnReport) -> Usage {
    let get = |k: &str| report.usage.get(k).and_then(Value::as_f64).unwrap_or(0.0) as u64;
    let (prompt, completion) = (get("prompt_tokens"), get("completion_tokens"));
    let total = match get("total_tokens") {
        0 => prompt + completion,
        t => t,
    };
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
    }
}

fn finish_reason(report: &TurnReport) -> &'static str {
    if report.hit_iteration_cap {
        "length"
    } else {
        "stop"
    }
}

/// plughost's own account of the turn, beside the OpenAI fields.
#[derive(serde::Serialize)]
struct Extension<'a> {
    session: Option<&'a str>,
    iterations: usize,
    tool_calls: Vec<CallSummary<'a>>,
    skipped: Option<&'a str>,
    command: bool,
}

/// One tool call of the turn, in [`Extension`].
#[derive(serde::Serialize)]
struct CallSummary<'a> {
    name: &'a str,
    outcome: &'static str,
    result: &'a str,
}

fn extension<'a>(report: &'a TurnReport, session: Option<&'a str>) -> Extension<'a> {
    Extension {
        session,
        iterations: report.iterations,
        tool_calls: report
            .tool_calls
            .iter()
            .map(|c| CallSummary {
                name: &c.name,
                outcome: c.outcome.kind(),
                result: &c.result,
            })
            .collect(),
        skipped: report.skipped.as_deref(),
        command: report.command,
    }
}

/// A non-streamed answer: written straight from the report, with no JSON
/// tree made first (each of its objects a map to hash keys into).
#[derive(serde::Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: Usage,
    plughost: Extension<'a>,
}

#[derive(serde::Serialize)]
struct Choice<'a> {
    index: u32,
    message: AnswerMessage<'a>,
    finish_reason: &'static str,
}

#[derive(serde::Serialize)]
struct AnswerMessage<'a> {
    role: &'static str,
    content: &'a str,
}

/// This process's id, asked of the kernel once (`getpid` is a system call
/// every time; a request's session key names it).
fn server_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// A turn of a request: where its conversation lives and how it ends.
struct Turn {
    state: Arc<ChatState>,
    key: String,
    /// The session lives only for this request.
    ephemeral: bool,
    inbound: Inbound,
    /// A named session's mark of use, held until the turn has ended.
    _in_use: Option<InUse>,
}

impl Turn {
    fn new(
        state: Arc<ChatState>,
        conversation: &mut Conversation,
        session: Option<String>,
        in_use: Option<InUse>,
    ) -> Result<Turn, String> {
        let (key, ephemeral) = match session {
            Some(name) => (name, false),
            None => {
                let n = state.next.fetch_add(1, Ordering::Relaxed);
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or_default();
                (format!("api-{}-{nanos}-{n}", server_pid()), true)
            }
        };
        // A request's own conversation lives in memory: its key is this
        // request's alone, so no transcript or lock file is needed.
        if ephemeral {
            let history = std::mem::take(&mut conversation.history);
            state.agent.sessions().open_in_memory(&key, history);
        }
        let mut inbound = Inbound::new(&key, &conversation.input);
        inbound.channel = "openai".into();
        inbound.sender_id = conversation.user.clone().unwrap_or_else(|| "api".into());
        Ok(Turn {
            state,
            key,
            ephemeral,
            inbound,
            _in_use: in_use,
        })
    }

    /// Run the turn to its end (or until `cancel`), then finalize an
    /// ephemeral session and remove its files.
    async fn run(
        self,
        events: Option<tokio::sync::mpsc::UnboundedSender<AgentEvent>>,
        cancel: CancellationToken,
    ) -> TurnReport {
        let agent = &self.state.agent;
        let report = agent
            .send_cancellable(self.inbound, events, cancel.cancelled_owned())
            .await;
        let result = if report.interrupted {
            "cancelled"
        } else if report.error.is_some() {
            "failed"
        } else {
            "completed"
        };
        self.state.metrics.turn(result);
        for call in &report.tool_calls {
            self.state.metrics.tool_call(
                "chat",
                call.outcome.kind(),
                Duration::from_secs_f64(call.duration_ms / 1000.0),
            );
        }
        if self.ephemeral {
            agent.finalize_session(&self.key).await;
        }
        report
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Arc<ChatState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (mut conversation, session) = match admitted(&state, &headers, &body) {
        Ok(admitted) => admitted,
        Err(answer) => return answer,
    };
    // Idempotency-Key and the session's cluster lease.
    let prepared = match state.replicas.get() {
        Some(r) => match r
            .before_turn(&headers, &body, session.as_deref(), conversation.stream)
            .await
        {
            Ok(p) => Some(p),
            Err(answer) => return answer,
        },
        None => None,
    };
    // A named session is marked in use before its turn starts, so it is
    // not evicted under it (an eviction under way finishes first).
    let in_use = match &session {
        Some(name) => Some(state.named.enter(name).await),
        None => None,
    };
    let turn = match Turn::new(state.clone(), &mut conversation, session.clone(), in_use) {
        Ok(t) => t,
        Err(message) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "transcript",
                message,
            )
        }
    };
    // The turn runs in its own task: a client that goes away cancels it
    // (through the guard), and it still ends properly (session hooks,
    // transcript, clean-up) instead of being dropped mid-way.
    let cancel = state.turns_cancel.child_token();
    let guard = cancel.clone().drop_guard();
    let id = format!(
        "chatcmpl-{}{:x}",
        state.id_prefix,
        state.next.fetch_add(1, Ordering::Relaxed)
    );
    let created = now_secs();
    if conversation.stream {
        return stream(
            state,
            turn,
            cancel,
            guard,
            id,
            created,
            conversation.include_usage,
            session,
        );
    }
    let task = tokio::spawn(turn.run(None, cancel));
    let report = match task.await {
        Ok(report) => report,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "turn_failed",
                format!("the turn failed: {e}"),
            )
        }
    };
    drop(guard);
    if let Some(answer) = failed(&report, prepared.as_ref()).await {
        return answer;
    }
    let answer = Completion {
        id: &id,
        object: "chat.completion",
        created,
        model: &state.model_id,
        choices: [Choice {
            index: 0,
            message: AnswerMessage {
                role: "assistant",
                content: report.reply.as_deref().unwrap_or_default(),
            },
            finish_reason: finish_reason(&report),
        }],
        usage: usage(&report),
        plughost: extension(&report, session.as_deref()),
    };
    // Stored for a retry with the same Idempotency-Key.
    if let Some(prepared) = prepared {
        if let Some(unstored) = prepared.answered(&json!(answer)).await {
            return unstored;
        }
    }
    Json(answer).into_response()
}

/// The request's conversation and session name, unless the request is
/// malformed (400) or the server is shutting down (503).
// The `Err` is the handler's answer as it is sent.
#[allow(clippy::result_large_err)]
fn admitted(
    state: &ChatState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Conversation, Option<String>), Response> {
    let conversation = parse_request(body).map_err(bad_request)?;
    let session = session_name(headers).map_err(bad_request)?;
    if state.turns_cancel.is_cancelled() {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "shutting_down",
            "plughost serve is shutting down; retry against another instance",
        ));
    }
    Ok((conversation, session))
}

/// The answer to a turn that did not complete: cancelled (503), cut short
/// by the shared store's outage (503, retryable) or failed (502).
async fn failed(report: &TurnReport, prepared: Option<&Prepared>) -> Option<Response> {
    if report.interrupted {
        return Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "cancelled",
            "the turn was cancelled: plughost serve is shutting down",
        ));
    }
    let e = report.error.as_ref()?;
    // A turn the shared store's outage cut short is retryable (503).
    if let Some(answer) = match prepared {
        Some(p) => p.unavailable_now().await,
        None => None,
    } {
        return Some(answer);
    }
    Some(error(
        StatusCode::BAD_GATEWAY,
        "server_error",
        "agent_error",
        format!("the agent turn failed: {e}"),
    ))
}

#[allow(clippy::too_many_arguments)]
fn stream(
    state: Arc<ChatState>,
    turn: Turn,
    cancel: CancellationToken,
    guard: tokio_util::sync::DropGuard,
    id: String,
    created: u64,
    include_usage: bool,
    session: Option<String>,
) -> Response {
    let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let model = state.model_id.clone();
    let id_for_usage = id.clone();
    let chunk = move |delta: Value, finish: Option<&str>| {
        let body = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        Event::default().data(body.to_string())
    };
    let _ = out_tx.send(chunk(json!({"role": "assistant", "content": ""}), None));
    let (ev_tx, mut ev_rx) = tokio::sync::mpsc::unbounded_channel::<AgentEvent>();
    let (chunk_for_events, events_out) = (chunk.clone(), out_tx.clone());
    let relay = tokio::spawn(async move {
        // A blank line between the text of two model iterations.
        let mut new_iteration = false;
        let mut any_text = false;
        while let Some(event) = ev_rx.recv().await {
            match event {
                AgentEvent::IterationStart => new_iteration = true,
                AgentEvent::TextDelta(text) if !text.is_empty() => {
                    let text = if new_iteration && any_text {
                        format!("\n\n{text}")
                    } else {
                        text
                    };
                    new_iteration = false;
                    any_text = true;
                    let _ = events_out.send(chunk_for_events(json!({"content": text}), None));
                }
                _ => {}
            }
        }
    });
    let model_id = state.model_id.clone();
    tokio::spawn(async move {
        let report = turn.run(Some(ev_tx), cancel).await;
        let _ = relay.await;
        let streamed = !report.command && report.error.is_none() && !report.interrupted;
        if let Some(reply) = &report.reply {
            if !streamed || report.ended_by == crate::core::hooks::EndedBy::IterationCap {
                let _ = out_tx.send(chunk(json!({"content": reply}), None));
            }
        }
        let _ = out_tx.send(chunk(json!({}), Some(finish_reason(&report))));
        if include_usage {
            let body = json!({"id": id_for_usage, "object": "chat.completion.chunk", "created": created,
                "model": model_id, "choices": [], "usage": usage(&report),
                "plughost": extension(&report, session.as_deref())});
            let _ = out_tx.send(Event::default().data(body.to_string()));
        }
        let _ = out_tx.send(Event::default().data("[DONE]"));
    });
    let events = futures_util::stream::unfold((out_rx, guard), |(mut rx, guard)| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<Event, std::convert::Infallible>(event), (rx, guard)))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
