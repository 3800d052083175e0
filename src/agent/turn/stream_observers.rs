//! The stream observers of a turn ([`Point::StreamStart`],
//! [`Point::StreamDelta`], [`Point::StreamEnd`], [`Point::InterimMessage`]:
//! Hermes's `on_stream_*` and `on_interim_message`), fired off the token
//! path as Hermes's `agent/plugin_stream_hooks.py` fires them: the loop
//! only queues an event (never waiting for a plugin), and one task per
//! turn fires the queued events in order. The queue holds 1,024 events;
//! when it is full the oldest is dropped, so a stalled observer loses
//! events, never the turn's time. The turn's end waits for what is queued
//! (bounded by the hook budget), so every event of a turn is heard before
//! the next turn of the session starts.
//!
//! Only a turn whose plugin set has such an observer pays for any of it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;

use crate::agent::provider::StreamEvent;
use crate::agent::AgentEvent;

use crate::core::hooks::{Point, TurnScope, CURRENT_TURN};
use crate::core::loop_points::observe_lanes;
use crate::core::registry::Registry;
use crate::host::Pinned;

/// How many events wait at most (Hermes's `_QUEUE_SIZE`).
const QUEUE_SIZE: usize = 1024;

/// The points a stream observer listens at.
const POINTS: [Point; 4] = [
    Point::StreamStart,
    Point::StreamDelta,
    Point::StreamEnd,
    Point::InterimMessage,
];

/// One queued event: its point and the keywords it adds to the turn's.
type Event = (Point, Map<String, Value>);

#[derive(Default)]
struct Queue {
    events: Mutex<Queued>,
    ready: Notify,
}

#[derive(Default)]
struct Queued {
    events: VecDeque<Event>,
    closed: bool,
    dropped: u64,
    /// The text streamed since the last start (for `already_streamed`).
    streamed: String,
}

/// A turn's stream observers: the task that fires their events.
pub(super) struct StreamObservers {
    sink: Sink,
    task: tokio::task::JoinHandle<()>,
    budget: Option<Duration>,
}

/// Where the loop queues the observers' events (cheap to clone: a call's
/// delta relay holds one).
#[derive(Clone)]
pub(super) struct Sink {
    queue: Arc<Queue>,
}

impl StreamObservers {
    /// The turn's observers, when its plugin set has any; `base` is what
    /// every event carries. Their failures are the turn's hook errors.
    pub fn start(
        registry: Pinned<Registry>,
        turn: &Arc<TurnScope>,
        base: impl FnOnce() -> Map<String, Value>,
    ) -> Option<StreamObservers> {
        let hooks = registry.hooks();
        if !POINTS.iter().any(|p| hooks.lanes_at(*p).next().is_some()) {
            return None;
        }
        // Made only for observers: it counts the session's user messages.
        let base = base();
        let budget = registry.hook_timeout;
        let queue = Arc::new(Queue::default());
        let task = tokio::spawn(
            CURRENT_TURN.scope(turn.clone(), fire_queued(registry, queue.clone(), base)),
        );
        Some(StreamObservers {
            sink: Sink { queue },
            task,
            budget,
        })
    }

    /// Where to queue events.
    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// Close the queue and wait (within the hook budget) until what is in
    /// it was heard.
    pub async fn finish(self) {
        {
            let mut q = self
                .sink
                .queue
                .events
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            q.closed = true;
            if q.dropped > 0 {
                tracing::warn!(
                    "stream observers: {} event(s) dropped, the observers were too slow for the stream (the queue holds {QUEUE_SIZE})",
                    q.dropped
                );
            }
        }
        self.sink.queue.ready.notify_one();
        let mut task = self.task;
        let waited = match self.budget {
            Some(limit) => tokio::time::timeout(limit, &mut task).await.is_ok(),
            None => {
                let _ = (&mut task).await;
                true
            }
        };
        if !waited {
            tracing::warn!(
                "stream observers: still busy at the end of the turn past the hook budget; their remaining events are dropped"
            );
            task.abort();
        }
    }
}

impl Sink {
    fn push(&self, point: Point, params: Map<String, Value>) {
        let mut q = self.queue.events.lock().unwrap_or_else(|e| e.into_inner());
        if q.events.len() >= QUEUE_SIZE {
            q.events.pop_front();
            q.dropped += 1;
        }
        q.events.push_back((point, params));
        drop(q);
        self.queue.ready.notify_one();
    }

    /// A model call's attempt begins (`iteration` is the turn's).
    pub fn stream_start(&self, iteration: usize) {
        self.queue
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .streamed
            .clear();
        self.push(Point::StreamStart, iteration_only(iteration));
    }

    /// A piece of its streamed text.
    pub fn stream_delta(&self, iteration: usize, delta: &str) {
        if delta.is_empty() {
            return;
        }
        self.queue
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .streamed
            .push_str(delta);
        let mut params = iteration_only(iteration);
        params.insert("delta".into(), Value::from(delta));
        params.insert("kind".into(), Value::from("text"));
        self.push(Point::StreamDelta, params);
    }

    /// The attempt ended: `Ok(text)` answered, `Err(error)` failed.
    pub fn stream_end(&self, iteration: usize, outcome: Result<&str, &str>) {
        let mut params = iteration_only(iteration);
        let (text, finished, error) = match outcome {
            Ok(text) => (text, true, Value::Null),
            Err(e) => ("", false, Value::from(e)),
        };
        params.insert("final_text".into(), Value::from(text));
        params.insert("finished".into(), Value::from(finished));
        params.insert("error".into(), error);
        self.push(Point::StreamEnd, params);
    }

    /// The text that came with tool calls (or an answer the turn went on
    /// past), when it has any.
    pub fn interim(&self, iteration: usize, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        let streamed = {
            let q = self.queue.events.lock().unwrap_or_else(|e| e.into_inner());
            squeezed(&q.streamed) == squeezed(text)
        };
        let mut params = iteration_only(iteration);
        params.insert("text".into(), Value::from(text));
        params.insert("already_streamed".into(), Value::from(streamed));
        self.push(Point::InterimMessage, params);
    }
}

fn iteration_only(iteration: usize) -> Map<String, Value> {
    let mut params = Map::new();
    params.insert("iteration".into(), Value::from(iteration));
    params
}

/// `text` with its whitespace runs made single spaces, trimmed (Hermes
/// compares interim text with the streamed text so).
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The task that fires the queued events, in order, until the queue is
/// closed and empty.
async fn fire_queued(registry: Pinned<Registry>, queue: Arc<Queue>, base: Map<String, Value>) {
    loop {
        let next = {
            let mut q = queue.events.lock().unwrap_or_else(|e| e.into_inner());
            match q.events.pop_front() {
                Some(event) => Some(event),
                None if q.closed => return,
                None => None,
            }
        };
        let Some((point, extra)) = next else {
            queue.ready.notified().await;
            continue;
        };
        let mut params = base.clone();
        params.extend(extra);
        let session_id = params
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        observe_lanes(&registry, point, &session_id, params).await;
    }
}

/// The delta channel of one provider call: each piece of text goes to the
/// caller's event stream (when it has one) and to the turn's observers
/// (when it has any, with the turn's `iteration`); `None` when neither
/// listens. The relay task ends when the provider drops its sender.
pub(super) fn relay(
    events: Option<UnboundedSender<AgentEvent>>,
    observers: Option<(Sink, usize)>,
) -> (
    Option<UnboundedSender<StreamEvent>>,
    Option<tokio::task::JoinHandle<()>>,
) {
    if events.is_none() && observers.is_none() {
        return (None, None);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<StreamEvent>();
    let relay = tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            if let (StreamEvent::TextDelta(delta), Some((sink, iteration))) = (&item, &observers) {
                sink.stream_delta(*iteration, delta);
            }
            if let Some(events) = &events {
                let _ = events.send(match item {
                    StreamEvent::TextDelta(delta) => AgentEvent::TextDelta(delta),
                    StreamEvent::IterationStart => AgentEvent::IterationStart,
                });
            }
        }
    });
    (Some(tx), Some(relay))
}
