//! One turn's model loop, as stages: the user message and P4, then per
//! iteration the prompt ([`Inner::prompt`]), the provider call
//! ([`Inner::call_model`]), the reply ([`Inner::replied`]) and the tool
//! batch ([`Inner::run_batch`]), each firing its points through
//! [`crate::core::loop_points`] in one line.

mod answer;
mod end;
mod messages;
mod middleware;
mod stream_observers;
mod tools;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::provider::{ChatRequest, ChatResponse};
use super::session::Session;
use super::{ms, AgentEvent, Inner, TurnReport};
use crate::core::dispatch;
use crate::core::hooks::{
    EndedBy, HookEvent, LlmCallContext, LoopContext, TurnScope, MAX_MODEL_RETRIES,
};
use crate::core::loop_points::{self as points, Replied};
use messages::take_system;
use messages::wire_message;
use messages::{after_system, answered, join_system, llm_base, reply_as_response};
use messages::{assistant_message, into_wire_message, split_system, stop_reason, system_of};
use stream_observers::StreamObservers;

/// What a turn's stages share.
pub(super) struct Turn<'a> {
    pub session: &'a mut Session,
    pub report: &'a mut TurnReport,
    pub content: &'a str,
    pub events: Option<&'a UnboundedSender<AgentEvent>>,
    pub tool_filter: Option<&'a [String]>,
    pub turn: &'a Arc<TurnScope>,
    pub delegate: bool,
    /// The in-flight list (system prompt first), carried across iterations.
    inflight: Vec<Value>,
    iteration: usize,
    /// How often the answer point continued this turn.
    continued: usize,
    /// The turn's stream observers, when its plugins have any.
    observers: Option<StreamObservers>,
}

impl<'a> Turn<'a> {
    pub fn new(
        session: &'a mut Session,
        report: &'a mut TurnReport,
        content: &'a str,
        (events, tool_filter): (
            Option<&'a UnboundedSender<AgentEvent>>,
            Option<&'a [String]>,
        ),
        (turn, delegate): (&'a Arc<TurnScope>, bool),
    ) -> Turn<'a> {
        Turn {
            session,
            report,
            content,
            events,
            tool_filter,
            turn,
            delegate,
            inflight: Vec::new(),
            iteration: 0,
            continued: 0,
            observers: None,
        }
    }

    /// Store `message` in the transcript and the report.
    fn record(&mut self, message: Value) -> Result<(), String> {
        self.session
            .append(message.clone())
            .map_err(|e| format!("cannot write the transcript: {e}"))?;
        self.report.messages.push(message);
        Ok(())
    }

    /// The messages of this iteration's provider call, system prompt
    /// first (kept in the report's last model call).
    fn sent_messages(&self) -> Vec<Value> {
        self.report
            .model_calls
            .last()
            .map(crate::agent::ModelCall::sent_messages)
            .unwrap_or_default()
    }
}

/// The report's account of one provider call (tool names).
fn model_call_record(iteration: usize, sent: &mut Sent, tools: Value) -> crate::agent::ModelCall {
    crate::agent::ModelCall {
        iteration,
        model: sent.request.model.clone(),
        params: sent.params.clone(),
        system: sent.call_system.take(),
        messages: sent.call_messages.clone(),
        tools,
    }
}

/// Whether a callback sees a model event's context (`pre_llm_call` and the
/// other events built on [`LlmCallContext`]): without one, the contexts
/// need not copy the call's messages and tools.
fn llm_observed(registry: &crate::core::registry::Registry) -> bool {
    [
        HookEvent::PromptContext,
        HookEvent::RequestSending,
        HookEvent::ResponseArrived,
        HookEvent::ExchangeDone,
        HookEvent::RequestFailed,
        HookEvent::ReplyRewrite,
    ]
    .into_iter()
    .any(|event| !registry.hooks().entries(event).is_empty())
}

/// Whether a stage ended the turn.
enum Flow {
    Next,
    Done,
}

/// One provider call as it was sent.
struct Sent {
    request: ChatRequest,
    /// The call's system prompt message, until `call_model` moves it into
    /// the report ([`Turn::sent_messages`] after that).
    call_system: Option<Value>,
    /// The call's other messages, as sent; the request and the report
    /// share them (a middleware may give the request others).
    call_messages: Arc<Vec<Value>>,
    params: Map<String, Value>,
    /// `pre_api_request`'s context, the base of the events after the call.
    api: LlmCallContext,
}

impl Inner {
    pub(super) async fn run_turn(self: &Arc<Self>, t: &mut Turn<'_>) -> Result<(), String> {
        let observers =
            StreamObservers::start(self.host.registry(), t.turn, || self.stream_keywords(t));
        t.observers = observers;
        let result = self.model_loop(t).await;
        if let Some(observers) = t.observers.take() {
            observers.finish().await;
        }
        result
    }

    /// What every stream observer's event of the turn carries, as Hermes's
    /// `_stream_hook_base_payload` has it: `turn_id` is the session's key
    /// and the turn's number in it (`main:3`), `surface` is `cli` as the
    /// `platform` of plughost's other Hermes hooks.
    fn stream_keywords(&self, t: &Turn<'_>) -> Map<String, Value> {
        let turns = t
            .session
            .messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .count();
        let model = self.model();
        // `provider:model`; a provider with one model (`scripted`) is both.
        let (provider, model_name) = model
            .split_once(':')
            .unwrap_or((model.as_str(), model.as_str()));
        let mut base = Map::new();
        base.insert(
            "turn_id".into(),
            json!(format!("{}:{}", t.session.key, turns + 1)),
        );
        base.insert("session_id".into(), json!(t.session.key));
        base.insert("model".into(), json!(model_name));
        base.insert("provider".into(), json!(provider));
        base.insert("surface".into(), json!("cli"));
        base
    }

    async fn model_loop(self: &Arc<Self>, t: &mut Turn<'_>) -> Result<(), String> {
        let registry = self.host.registry();
        t.record(json!({"role": "user", "content": t.content}))?;
        // P4: the turn's in-flight list, system prompt first. Edits shape
        // every call of this turn; the transcript keeps the originals.
        let mut inflight = vec![json!({"role": "system", "content": self.config.system_prompt})];
        inflight.extend(t.session.model_messages());
        // P4 shows the turn's message as its text too (what the turn is
        // about, whatever callbacks append to the list).
        let context = || LoopContext {
            text: t.content.to_string(),
            ..self.loop_context(&t.session.key, t.delegate, t.turn)
        };
        let (messages, stop) = points::history_ready(&registry, inflight, context).await;
        t.inflight = messages;
        if let Some(text) = stop {
            return self
                .final_answer(t, (text, Value::Null, EndedBy::ShortCircuit))
                .await;
        }
        for iteration in 1..=self.config.max_iterations {
            t.iteration = iteration;
            t.report.iterations = iteration;
            // Messages Hermes plugins injected (ctx.inject_message) join here.
            for text in self.host.take_injected(&t.session.key) {
                let injected = json!({"role": "user", "content": text});
                t.record(injected.clone())?;
                t.inflight.push(injected);
            }
            if let Flow::Done = self.iteration(t).await? {
                return Ok(());
            }
        }
        let cap = self.config.max_iterations;
        t.report.hit_iteration_cap = true;
        t.report.ended_by = EndedBy::IterationCap;
        t.report.reply = Some(format!(
            "Stopped after {cap} model iterations without a final answer (the iteration cap; raise it with --max-iterations)."
        ));
        Ok(())
    }

    /// A loop point's context for this iteration.
    fn point(
        &self,
        t: &Turn<'_>,
        event: HookEvent,
        messages: Vec<Value>,
        tools: Vec<Value>,
    ) -> LoopContext {
        LoopContext {
            iteration: t.iteration,
            messages,
            tools,
            stage: Some(event),
            ..self.loop_context(&t.session.key, t.delegate, t.turn)
        }
    }

    /// One model iteration: prompt, call, reply, then its tool calls.
    async fn iteration(self: &Arc<Self>, t: &mut Turn<'_>) -> Result<Flow, String> {
        let sent = self.prompt(t).await;
        let (response, mut sent) = self.call_model(t, sent).await?;
        let (response, assistant) = match self.replied(t, &mut sent, response).await {
            Ok(replied) => replied,
            Err(text) => {
                let ended = (text, Value::Null, EndedBy::ShortCircuit);
                self.final_answer(t, ended).await?;
                return Ok(Flow::Done);
            }
        };
        if response.tool_calls.is_empty() {
            if let Some(message) = self.answer_ready(t, &response.text, &assistant).await {
                // The answer stays, as an interim message; the lane's text
                // is what the model answers next.
                if let Some(observers) = &t.observers {
                    observers.sink().interim(t.iteration, &response.text);
                }
                t.record(assistant.clone())?;
                t.inflight.push(assistant);
                let nudge = json!({"role": "user", "content": message});
                t.record(nudge.clone())?;
                t.inflight.push(nudge);
                t.continued += 1;
                return Ok(Flow::Next);
            }
            self.final_answer(t, (response.text, assistant, EndedBy::Answer))
                .await?;
            self.transform_output(t, &mut sent.api).await;
            return Ok(Flow::Done);
        }
        t.record(assistant.clone())?;
        t.inflight.push(assistant);
        if let Some(observers) = &t.observers {
            observers.sink().interim(t.iteration, &response.text);
        }
        self.run_batch(t, response).await
    }

    /// P5, `pre_llm_call`'s injection, P6, `pre_api_request`, P7: what this
    /// call sends.
    async fn prompt(&self, t: &mut Turn<'_>) -> Sent {
        let registry = self.host.registry();
        // What this call offers: rebuilt every iteration, edited at P5 (Codumentor's `tools`).
        let mut offered = self.tool_definitions(t.tool_filter);
        let mut inflight = std::mem::take(&mut t.inflight);
        let context = |event, messages| self.point(t, event, messages, offered.to_vec());
        if let Some(edited) = points::prompt_assembly(&registry, &mut inflight, context).await {
            offered = Arc::new(edited);
        }
        // P6: this call's copy (Flowly's injection, then the edits of this call only).
        let mut call_messages = inflight.clone();
        // The model events' contexts carry this call's messages and tools
        // only when a callback will see them.
        let observed = llm_observed(&registry);
        let mut llm = LlmCallContext {
            session_id: t.session.key.clone(),
            model: self.model(),
            system: system_of(&call_messages),
            user_message: t.content.to_string(),
            ..Default::default()
        };
        if observed {
            llm.messages = after_system(&call_messages).to_vec();
            llm.tools = offered.to_vec();
        }
        let injected = dispatch::fire_prompt_context(&registry, &mut llm).await;
        if !injected.is_empty() {
            let (system, mut messages) = split_system(&call_messages);
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
        // Appends reach this call and are carried to later iterations.
        let context = |messages| self.point(t, HookEvent::PromptFinal, messages, offered.to_vec());
        let call_messages =
            points::final_prompt(&registry, call_messages, &mut inflight, context).await;
        t.inflight = inflight;
        let mut call_messages: Vec<Value> =
            call_messages.into_iter().map(into_wire_message).collect();
        let system = system_of(&call_messages);
        // The request and the report share the rest.
        let call_system = take_system(&mut call_messages);
        let call_messages = Arc::new(call_messages);
        let mut request = ChatRequest {
            model: self.model(),
            system,
            messages: call_messages.clone(),
            tools: offered,
            session_key: t.session.key.clone(),
            params: Map::new(),
        };
        let mut api = llm_base(&llm);
        if observed {
            api.messages = request.messages.to_vec();
        }
        points::observe_in(&registry, HookEvent::RequestSending, &mut api).await;
        // P7: the model and parameters of this call.
        let mut params = Map::new();
        let context = || {
            let sent = call_system.iter().chain(call_messages.iter());
            self.point(
                t,
                HookEvent::ModelCallStart,
                sent.cloned().collect(),
                request.tools.to_vec(),
            )
        };
        if let Some((model, edited)) = points::model_call_start(&registry, context).await {
            if let Some(model) = model {
                request.model = model;
            }
            params = edited;
            request.params = params.clone();
        }
        let context = || self.point(t, HookEvent::ModelCallStart, Vec::new(), Vec::new());
        middleware::request(&registry, &mut request, context).await;
        Sent {
            request,
            call_system,
            call_messages,
            params,
            api,
        }
    }

    /// The provider call, retried as P7e asks; `api_request_error` and the
    /// turn's error when it fails for good.
    async fn call_model(
        &self,
        t: &mut Turn<'_>,
        mut sent: Sent,
    ) -> Result<(ChatResponse, Sent), String> {
        let registry = self.host.registry();
        // The call's messages move into the report (the contexts of later
        // points copy them from there, when a callback will see them).
        let tools = self.offered_names(&sent.request.tools);
        let call = model_call_record(t.iteration, &mut sent, tools);
        t.report.model_calls.push(call);
        let request = &sent.request;
        let model_started = Instant::now();
        let mut retries = 0;
        let response = loop {
            let observing = t
                .observers
                .as_ref()
                .map(|o| (o.sink().clone(), t.iteration));
            if let Some((sink, iteration)) = &observing {
                sink.stream_start(*iteration);
            }
            let (delta_tx, relay) = stream_observers::relay(t.events.cloned(), observing.clone());
            let response =
                middleware::complete(&registry, &self.provider, request.clone(), delta_tx).await;
            if let (Some((sink, iteration)), Some(relay)) = (&observing, relay) {
                // Every delta of the call is queued before its end (the
                // provider dropped its sender, so the relay is finishing).
                let _ = tokio::time::timeout(Duration::from_secs(1), relay).await;
                let outcome = match &response {
                    Ok(r) => Ok(r.text.as_str()),
                    Err(middleware::Failed::Blocked(e) | middleware::Failed::Call(e)) => {
                        Err(e.as_str())
                    }
                };
                sink.stream_end(*iteration, outcome);
            }
            let error = match response {
                Ok(r) => break Ok(r),
                // A block is the call's end: never retried.
                Err(middleware::Failed::Blocked(reason)) => break Err(reason),
                Err(middleware::Failed::Call(e)) => e,
            };
            // P7e: a callback may ask for the call again (bounded).
            if retries >= MAX_MODEL_RETRIES {
                break Err(error);
            }
            let context = || LoopContext {
                model: request.model.clone(),
                params: sent.params.clone(),
                error: Some(error.clone()),
                ..self.point(
                    t,
                    HookEvent::ModelCallError,
                    t.sent_messages(),
                    request.tools.to_vec(),
                )
            };
            let Some(delay_ms) = points::model_error(&registry, context).await else {
                break Err(error);
            };
            retries += 1;
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        };
        t.report.timings.model_ms += ms(model_started.elapsed());
        match response {
            Ok(r) => Ok((r, sent)),
            Err(e) => {
                let failed = || LlmCallContext {
                    response: json!({"error": e}),
                    ..llm_base(&sent.api)
                };
                points::observe(&registry, HookEvent::RequestFailed, failed).await;
                Err(format!("model call failed: {e}"))
            }
        }
    }

    /// Usage summed, `post_api_request`, `post_llm_call`, then P8: the
    /// reply the loop acts on, or (`Err`) the short-circuit's answer.
    async fn replied(
        &self,
        t: &mut Turn<'_>,
        // `&mut` only to be `Send` (a context is not `Sync`).
        sent: &mut Sent,
        mut response: ChatResponse,
    ) -> Result<(ChatResponse, Value), String> {
        let registry = self.host.registry();
        for (k, v) in &response.usage {
            let sum = t.report.usage.get(k).and_then(Value::as_f64).unwrap_or(0.0)
                + v.as_f64().unwrap_or(0.0);
            t.report.usage.insert(k.clone(), json!(sum));
        }
        if registry.observed() {
            registry.observe_model_call(&crate::core::observers::ObservedModelCall {
                model: &sent.request.model,
                session_id: &t.session.key,
                usage: &response.usage,
            });
        }
        // Each event gets its own context: a hook's edits to one never leak into the next.
        let post_api = || answered(&sent.api, &response);
        points::observe(&registry, HookEvent::ResponseArrived, post_api).await;
        let post_llm = || answered(&sent.api, &response);
        points::observe(&registry, HookEvent::ExchangeDone, post_llm).await;
        let mut assistant = assistant_message(&response);
        // P8: the reply the loop records and acts on, tool calls included.
        let context = || LoopContext {
            model: sent.request.model.clone(),
            stop_reason: stop_reason(&response).into(),
            usage: response.usage.clone(),
            ..self.point(
                t,
                HookEvent::ModelReplied,
                t.sent_messages(),
                sent.request.tools.to_vec(),
            )
        };
        match points::model_replied(&registry, &assistant, context).await {
            Replied::AsIs => {}
            // The model's reply is discarded, its tool calls too.
            Replied::ShortCircuit(text) => return Err(text),
            Replied::Replaced(reply) => {
                response = reply_as_response(&reply, response);
                assistant = wire_message(&reply);
                assistant["role"] = json!("assistant");
            }
        }
        Ok((response, assistant))
    }

    /// transform_llm_output (Hermes): the first replacement is what the
    /// user gets; the transcript keeps what was stored.
    async fn transform_output(&self, t: &mut Turn<'_>, api: &mut LlmCallContext) {
        let Some(reply) = t.report.reply.clone() else {
            return;
        };
        let out = || LlmCallContext {
            assistant_message: reply,
            ..llm_base(api)
        };
        let registry = self.host.registry();
        if let Some(text) = points::replaced(&registry, HookEvent::ReplyRewrite, out).await {
            t.report.reply = Some(text);
        }
    }
}
