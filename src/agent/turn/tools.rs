//! A model reply's tool calls: each run through the pipeline (on a blocking
//! thread when its handler may block; bounded by the tool timeout), then the batch's marks combined
//! into how the turn goes on.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::{Flow, Turn};
use crate::agent::provider::{ChatResponse, ToolCallRequest};
use crate::agent::{ms, AgentEvent, Inner, ToolCallRecord};
use crate::core::dispatch::{self, ToolMarks};
use crate::core::hooks::{EndedBy, TurnScope, CURRENT_TURN};
use crate::core::outcome::{ArgumentProblem, ToolOutcome, ToolResult};

/// What a batch's calls asked of the turn, combined.
#[derive(Default)]
struct BatchMarks {
    all_terminate: bool,
    abort: Option<(String, String)>,
    short_circuit: Option<String>,
    inserted: Vec<Value>,
    fatal: bool,
}

impl BatchMarks {
    fn take(&mut self, marks: ToolMarks) {
        self.all_terminate &= marks.terminate;
        if self.abort.is_none() {
            self.abort = marks.abort;
        }
        if self.short_circuit.is_none() {
            self.short_circuit = marks.short_circuit;
        }
        self.inserted.extend(marks.insert);
        self.fatal |= marks.fatal;
    }
}

impl Inner {
    /// The reply's tool calls, concurrently; their results stored in call
    /// order; then an abort, a short-circuit or every call terminating
    /// (or a fatal failure) ends the turn.
    pub(super) async fn run_batch(
        self: &Arc<Self>,
        t: &mut Turn<'_>,
        response: ChatResponse,
    ) -> Result<Flow, String> {
        let tools_started = Instant::now();
        let calls = response.tool_calls.iter().map(|call| {
            self.run_tool(
                call,
                &t.session.key,
                t.events,
                t.tool_filter,
                (t.turn, t.delegate),
            )
        });
        let results = futures_util::future::join_all(calls).await;
        t.report.timings.tools_ms += ms(tools_started.elapsed());
        let mut batch = BatchMarks {
            all_terminate: true,
            ..Default::default()
        };
        for (call, (record, marks)) in response.tool_calls.iter().zip(results) {
            let message = json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": record.result});
            t.record(message.clone())?;
            t.inflight.push(message);
            t.report.tool_calls.push(record);
            batch.take(marks);
        }
        // After every result of the batch (a tool message must follow its call).
        t.inflight.extend(std::mem::take(&mut batch.inserted));
        if let Some((reason, text)) = batch.abort {
            // The abort's answer is stored, so the transcript shows how the turn ended.
            t.record(json!({"role": "assistant", "content": text}))?;
            t.report.reply = Some(text);
            t.report.aborted = Some(reason);
            t.report.ended_by = EndedBy::Aborted;
            return Ok(Flow::Done);
        }
        if let Some(text) = batch.short_circuit {
            self.final_answer(t, (text, Value::Null, EndedBy::ShortCircuit))
                .await?;
            return Ok(Flow::Done);
        }
        // A fatal failure ends the turn as every call terminating does
        // (Felix's react loop: `had_fatal`, then `all_terminate`).
        if batch.all_terminate || batch.fatal {
            t.report.reply = Some(response.text);
            t.report.ended_by = EndedBy::ToolTerminate;
            return Ok(Flow::Done);
        }
        Ok(Flow::Next)
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
        // The model's text is parsed here, once; the pipeline takes the
        // value itself and the record keeps the one copy (the report shows
        // the arguments as the model sent them, whatever hooks did).
        let parsed = if call.arguments.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str::<Value>(&call.arguments)
        };
        let mut marks = ToolMarks::default();
        let (result, arguments) = match parsed {
            Err(_) => (
                self.refused(
                    &call.name,
                    ToolOutcome::InvalidArguments {
                        problem: ArgumentProblem::NotJson,
                    },
                ),
                Value::Null,
            ),
            Ok(arguments) if filter.is_some_and(|f| !f.contains(&call.name)) => {
                (self.refused(&call.name, ToolOutcome::NotFound), arguments)
            }
            Ok(arguments) => {
                let (result, m) = self
                    .dispatch_with_timeout(call, arguments.clone(), session_key, (turn, delegate))
                    .await;
                marks = m;
                (result, arguments)
            }
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

    /// The pipeline under the tool timeout. A tool whose handler may block
    /// this thread (an in-process plugin's or a native sync one) runs on a
    /// blocking thread, so one that overruns can be abandoned; an isolated
    /// plugin's tool only awaits its worker's answer, so it runs on this
    /// task and the hop (a thread hand-off and a second scheduler per
    /// call) is saved. Its hooks run where every other hook of the turn
    /// runs, bounded by the hook timeout.
    async fn dispatch_with_timeout(
        &self,
        call: &ToolCallRequest,
        arguments: Value,
        session_key: &str,
        (turn, delegate): (&Arc<TurnScope>, bool),
    ) -> (ToolResult, ToolMarks) {
        let limit = self.config.tool_timeout;
        if self.awaits_only(&call.name) {
            let registry = self.host.registry();
            let run = dispatch::call_tool_in_turn(
                &registry,
                &call.name,
                arguments,
                session_key,
                &call.id,
                Some((turn.clone(), delegate)),
            );
            return match tokio::time::timeout(limit, CURRENT_TURN.scope(turn.clone(), run)).await {
                Ok(r) => (r.result, r.marks),
                Err(_) => (
                    self.refused(&call.name, ToolOutcome::TimedOut { after: limit }),
                    ToolMarks::default(),
                ),
            };
        }
        let host = self.host.clone();
        let turn = turn.clone();
        let (name, id, key) = (call.name.clone(), call.id.clone(), session_key.to_string());
        let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Handle::current();
        let job = tokio::task::spawn_blocking(move || {
            runtime.block_on(CURRENT_TURN.scope(turn.clone(), async move {
                let registry = host.registry();
                tokio::select! {
                    r = dispatch::call_tool_in_turn(&registry, &name, arguments, &key, &id, Some((turn, delegate))) => Some(r),
                    _ = cancel_rx => None,
                }
            }))
        });
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

    /// Whether tool `name`'s handler only awaits (never blocks the calling
    /// thread): the tool of an isolated plugin, whose handler sends the
    /// call to its worker and awaits the answer.
    fn awaits_only(&self, name: &str) -> bool {
        let registry = self.host.registry();
        let Some(tool) = registry.tool(name) else {
            return false;
        };
        let owner = tool.spec.plugin.as_str();
        self.host
            .plugins()
            .iter()
            .any(|p| p.isolated && p.key == owner)
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
