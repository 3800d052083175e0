//! Hermes's lanes and event rows: the hook names Hermes fires at a place
//! of the loop no core lane has, and every hook name it fires ([`EVENTS`]).
//! `pre_verify` may keep a turn going at the answer point
//! ([`super::verify`]); `pre_command` observes a recognised slash command
//! before its handler runs (`hermes_cli/plugins.py`: "returns IGNORED in v1"); the stream
//! observers (`on_stream_*`, `on_interim_message`) hear a model call's
//! streamed answer and the text that comes with tool calls; the middleware
//! lanes (`ctx.register_middleware`, `hermes_cli/middleware.py`) edit a
//! call's request (`tool_request`, `llm_request`) or run around it
//! (`tool_execution`, `llm_execution`: [`crate::core::pipeline::middleware`]).

use crate::core::hooks::{EventRow, HookError, HookEvent, Lane, LaneForm, LaneId, Point, Policy};

/// `pre_command`: before a recognised slash command's handler, with
/// Hermes's keywords (`surface`, `command`, `alias_used`, `args_raw`,
/// `session_key`, `platform`); answers are ignored.
pub static PRE_COMMAND: Lane = Lane::plain(
    &PRE_COMMAND,
    "pre_command",
    Point::CommandBefore,
    1,
    Policy::Observe,
    "Before a recognised slash command's handler runs in the agent (`chat`, `run \"/name …\"`, `serve`): `command` is its canonical name, `alias_used` the alias typed (else `None`), `args_raw` the text after it. Answers are ignored, as in Hermes v1.",
);

/// `pre_verify`: at the answer point, after a turn that edited files; the
/// first `{"action": "continue", "message": …}` keeps the turn going
/// ([`super::verify`]).
pub static PRE_VERIFY: Lane = Lane::plain(
    &PRE_VERIFY,
    "pre_verify",
    Point::AnswerReady,
    1,
    Policy::FirstWins,
    "When the model's reply has no tool calls and the turn wrote or edited files with the built-in tools: `final_response` is the answer, `changed_paths` the files, `attempt` how often the turn was continued already. The first answer `{\"action\": \"continue\", \"message\": …}` (or `{\"decision\": \"block\", \"reason\": …}`) keeps the turn going with that message as a user message, at most 3 times per turn (Hermes's default `agent.max_verify_nudges`).",
);

/// `on_stream_start`: a model call's streamed answer begins (each
/// attempt, retries included); answers are ignored. The stream observers
/// are fired off the token path, as Hermes's `agent/plugin_stream_hooks.py`
/// queues them (`crate::agent`'s `turn::stream_observers`).
pub static ON_STREAM_START: Lane = Lane::plain(
    &ON_STREAM_START,
    "on_stream_start",
    Point::StreamStart,
    1,
    Policy::Observe,
    "A model call's streamed answer begins (each attempt): `turn_id`, `iteration`, `session_id`, `model`, `provider`, `surface`. Fired off the token path; answers are ignored.",
);

/// `on_stream_delta`: a piece of the streamed text (`delta`, `kind`
/// `"text"`).
pub static ON_STREAM_DELTA: Lane = Lane::plain(
    &ON_STREAM_DELTA,
    "on_stream_delta",
    Point::StreamDelta,
    1,
    Policy::Observe,
    "A piece of a model call's streamed text: `delta`, `kind` (`\"text\"`), with the start's keywords. Queued (1,024 at most, the oldest dropped when full) and fired in order off the token path; answers are ignored.",
);

/// `on_stream_end`: the streamed answer ended (`final_text`, `finished`,
/// `error`).
pub static ON_STREAM_END: Lane = Lane::plain(
    &ON_STREAM_END,
    "on_stream_end",
    Point::StreamEnd,
    1,
    Policy::Observe,
    "A model call's streamed answer ended: `final_text` (the answer's text, `\"\"` after an error), `finished`, `error` (the failure's text, else `None`), with the start's keywords; after every delta of the call.",
);

/// `on_interim_message`: the text that accompanies tool calls, before they
/// run (`text`, `already_streamed`).
pub static ON_INTERIM_MESSAGE: Lane = Lane::plain(
    &ON_INTERIM_MESSAGE,
    "on_interim_message",
    Point::InterimMessage,
    1,
    Policy::Observe,
    "The model's text that comes with tool calls, after its stream ended and before the tools run (and an answer `pre_verify` kept the turn going past): `text`, `already_streamed` (it was streamed as it is), with the stream hooks' keywords. Answers are ignored.",
);

/// `gateway_platform_event`: a platform adapter's event that is not a
/// message, under `serve`'s gateway (`platform`, `event_type`, `payload`).
pub static GATEWAY_PLATFORM_EVENT: Lane = Lane::plain(
    &GATEWAY_PLATFORM_EVENT,
    "gateway_platform_event",
    Point::PlatformEvent,
    1,
    Policy::Observe,
    "Under `serve`'s gateway, when a platform's adapter reports an event that is not a message (its `_platform_event_handler(event, source)`): the event's `platform`, `event_type` and `payload` (a reaction, an edit, a deletion: each adapter's own contract). Answers are ignored.",
);

/// A chain over a tool call's arguments, before `pre_tool_call`.
pub static TOOL_REQUEST: Lane = Lane::plain(
    &TOOL_REQUEST,
    "tool_request",
    Point::ToolBefore,
    0,
    Policy::Chain,
    "Before every other lane of a tool call: callbacks may replace its arguments (tool_request middleware).",
);

/// A chain over a model call's request, after P7.
pub static LLM_REQUEST: Lane = Lane::plain(
    &LLM_REQUEST,
    "llm_request",
    Point::ModelCallBefore,
    0,
    Policy::Chain,
    "Just before the provider call: callbacks may replace the request (llm_request middleware).",
);

/// Around a tool's handler, each callback calling the rest of the chain.
pub static TOOL_EXECUTION: Lane = Lane::wrapping(
    &TOOL_EXECUTION,
    "tool_execution",
    Point::ToolAround,
    0,
    LaneForm::Around,
    "Around a tool's handler: each callback runs the rest of the chain through next_call, or not (tool_execution middleware).",
);

/// Around the provider call, each callback calling the rest of the chain.
pub static LLM_EXECUTION: Lane = Lane::wrapping(
    &LLM_EXECUTION,
    "llm_execution",
    Point::ModelCallBefore,
    1,
    LaneForm::Around,
    "Around the provider call: each callback runs the rest of the chain through next_call, may raise LLMExecutionBlocked (llm_execution middleware).",
);

/// Hermes's lanes, for the dialect table.
pub static LANES: &[&Lane] = &[
    &PRE_COMMAND,
    &PRE_VERIFY,
    &ON_STREAM_START,
    &ON_STREAM_DELTA,
    &ON_STREAM_END,
    &ON_INTERIM_MESSAGE,
    &GATEWAY_PLATFORM_EVENT,
    &TOOL_REQUEST,
    &LLM_REQUEST,
    &TOOL_EXECUTION,
    &LLM_EXECUTION,
];

/// Every hook name Hermes plugins register that fires in plughost, as its
/// row: the lane it fires on and how a failing callback counts. A failing
/// `pre_tool_call` callback blocks the call (Hermes's guards fail closed,
/// with its own messages); every other hook fails open.
pub static EVENTS: &[EventRow] = &[
    EventRow::closed("pre_tool_call", HookEvent::ToolGuard, pre_tool_call_refused),
    EventRow::open("post_tool_call", HookEvent::ToolDone),
    EventRow::open("transform_tool_result", HookEvent::ResultRewrite),
    EventRow::open("transform_terminal_output", HookEvent::ExecOutputRewrite),
    EventRow::open("pre_llm_call", HookEvent::PromptContext),
    EventRow::open("post_llm_call", HookEvent::ExchangeDone),
    EventRow::open("pre_api_request", HookEvent::RequestSending),
    EventRow::open("post_api_request", HookEvent::ResponseArrived),
    EventRow::open("on_session_start", HookEvent::SessionOpened),
    EventRow::open("on_session_end", HookEvent::TurnClosed),
    EventRow::open("on_session_finalize", HookEvent::SessionClosing),
    EventRow::open("on_session_reset", HookEvent::SessionCleared),
    EventRow::open("subagent_stop", HookEvent::SubagentDone),
    EventRow::open("pre_gateway_dispatch", HookEvent::InboundGate),
    EventRow::open("transform_llm_output", HookEvent::ReplyRewrite),
    EventRow::open("subagent_start", HookEvent::SubagentBegun),
    EventRow::open("api_request_error", HookEvent::RequestFailed),
    EventRow::open("pre_command", HookEvent::Lane(LaneId(&PRE_COMMAND))),
    EventRow::open("pre_verify", HookEvent::Lane(LaneId(&PRE_VERIFY))),
    EventRow::open("on_stream_start", HookEvent::Lane(LaneId(&ON_STREAM_START))),
    EventRow::open("on_stream_delta", HookEvent::Lane(LaneId(&ON_STREAM_DELTA))),
    EventRow::open("on_stream_end", HookEvent::Lane(LaneId(&ON_STREAM_END))),
    EventRow::open(
        "on_interim_message",
        HookEvent::Lane(LaneId(&ON_INTERIM_MESSAGE)),
    ),
    EventRow::open(
        "gateway_platform_event",
        HookEvent::Lane(LaneId(&GATEWAY_PLATFORM_EVENT)),
    ),
];

/// The row of a Hermes hook name that fires in plughost.
pub fn by_name(name: &str) -> Option<&'static EventRow> {
    EVENTS.iter().find(|r| r.name == name)
}

/// Hermes's name of `lane` (what its logs and errors say); the bus's name
/// for a lane no Hermes event fires on.
pub fn name_of(lane: HookEvent) -> &'static str {
    EventRow::name_among(EVENTS, lane)
}

/// Hermes's reason for blocking a call whose `pre_tool_call` callback
/// `label` failed.
fn pre_tool_call_refused(label: &str, error: &HookError) -> String {
    match error {
        HookError::TimedOut(_) | HookError::Overran(_) => {
            "pre_tool_call plugin callback timed out or is still running".to_string()
        }
        HookError::Raised(e) => format!(
            "pre_tool_call plugin callback {label} raised {}",
            e.described()
        ),
        other => format!("pre_tool_call plugin callback {label} failed: {other}"),
    }
}

/// The hook registrations of a provider plugin (a memory provider, a
/// context engine): one per `(lane, part, label)` of `lanes`, each calling
/// `callback(part)`, labelled `<name>.<label>`.
pub fn provider_hooks<P>(
    plugin: &str,
    name: &str,
    lanes: impl IntoIterator<Item = (HookEvent, P, &'static str)>,
    callback: impl Fn(P) -> std::sync::Arc<dyn crate::core::hooks::HookCallback>,
) -> Vec<crate::core::registry::Registration> {
    lanes
        .into_iter()
        .map(
            |(event, part, label)| crate::core::registry::Registration::Hook {
                event: Some(event),
                name: name_of(event).to_string(),
                entry: crate::core::hooks::HookEntry {
                    owner: plugin.to_string(),
                    label: format!("{name}.{label}"),
                    priority: 0,
                    callback: callback(part),
                    stats: std::sync::Arc::new(crate::core::hooks::HookStats::default()),
                },
            },
        )
        .collect()
}
