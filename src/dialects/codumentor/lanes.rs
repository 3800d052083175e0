//! The lanes Codumentor brings to the loop: where its events need a policy
//! no other lane at the point has; and its event rows ([`EVENTS`]): every
//! in-scope event and the lanes it fires on, its own or the core's.

use crate::core::hooks::{EventRow, HookEvent, Lane, LaneId, Point, Policy};

/// `onPromptAssemble`: each edit of the in-flight list is what the next
/// handler sees, and is carried to later model calls.
pub static PROMPT_ASSEMBLE: Lane = Lane::plain(
    &PROMPT_ASSEMBLE,
    "prompt_assemble",
    Point::PromptAssembly,
    2,
    Policy::Chain,
    "P5, second lane: before every model call; edits of the in-flight list are carried, never stored.",
);

/// `onToolInvokeStart`: every handler runs; the first veto wins and an
/// abort outranks it.
pub static TOOL_VET: Lane = Lane::plain(
    &TOOL_VET,
    "tool_vet",
    Point::ToolBefore,
    2,
    Policy::Veto,
    "P9, second lane: before a tool call; every callback runs, the first refusal wins, an abort outranks it.",
);

/// `onToolInvokeEnd`, `onAfterTool`: edits of the result chain; the point
/// keeps the first of each kind (a short-circuit, a re-run) and every append.
pub static TOOL_AFTER_CHAIN: Lane = Lane::plain(
    &TOOL_AFTER_CHAIN,
    "tool_after_chain",
    Point::ToolAfter,
    2,
    Policy::FirstOfEach,
    "P10, second lane: after the call ran; each edit of the result is what the next callback sees.",
);

/// `onScheduledRunGate`: before a scheduled task runs, each handler sees
/// the run descriptor as the previous one patched it; `skip` records a
/// skipped run instead of running it.
pub static SCHEDULED_RUN_GATE: Lane = Lane::plain(
    &SCHEDULED_RUN_GATE,
    "scheduled_run_gate",
    Point::ScheduledRun,
    1,
    Policy::Chain,
    "Before a plugin's scheduled task runs under `plughost serve` (or `plughost cron run`); patch `skip`/`skip_reason` into the run descriptor to skip this run.",
);

/// `onScheduledRunAutoDisabled`: a task was disabled after too many
/// consecutive failures.
pub static SCHEDULED_RUN_AUTO_DISABLED: Lane = Lane::plain(
    &SCHEDULED_RUN_AUTO_DISABLED,
    "scheduled_run_auto_disabled",
    Point::ScheduledDisabled,
    1,
    Policy::Observe,
    "A scheduled task failed too many times in a row and was disabled until plughost restarts.",
);

/// `onConfigReload`: after a reload swapped in the new plugins, with the
/// `config.json` sections that changed and the new config.
pub static CONFIG_RELOAD: Lane = Lane::plain(
    &CONFIG_RELOAD,
    "config_reload",
    Point::Reloaded,
    1,
    Policy::Observe,
    "After a reload (`POST /admin/reload`, `/reload-plugins`, `serve --watch`) applied changed sections of `config.json`: `sections` names them, `config` is the new config.",
);

/// Codumentor's lanes, for the dialect table.
pub static LANES: &[&Lane] = &[
    &PROMPT_ASSEMBLE,
    &TOOL_VET,
    &TOOL_AFTER_CHAIN,
    &SCHEDULED_RUN_GATE,
    &SCHEDULED_RUN_AUTO_DISABLED,
    &CONFIG_RELOAD,
];

const fn on(name: &'static str, lane: &'static Lane) -> EventRow {
    EventRow::open(name, HookEvent::Lane(LaneId(lane)))
}

/// Codumentor's in-scope events, each on its lane (an event on two lanes
/// has two rows); events sharing a lane keep the seed's order by their
/// rank (`onContextReady` before `onAfterInput`, `onLLMCallEnd`,
/// `onUsageTracked`, `onAfterLLM`; `onToolInvokeEnd` before `onAfterTool`).
/// Every one fails open.
pub static EVENTS: &[EventRow] = &[
    EventRow::open("onServerReady", HookEvent::HostStart),
    EventRow::open("onInputReceived", HookEvent::InputReceived),
    EventRow::open("onContextReady", HookEvent::HistoryReady),
    EventRow::open("onAfterInput", HookEvent::HistoryReady).ranked(1),
    on("onPromptAssemble", &PROMPT_ASSEMBLE),
    EventRow::open("onAfterPromptAssemble", HookEvent::PromptFinal),
    EventRow::open("onLLMCallStart", HookEvent::ModelCallStart),
    EventRow::open("onLLMError", HookEvent::ModelCallError),
    EventRow::open("onLLMCallEnd", HookEvent::ModelReplied),
    EventRow::open("onUsageTracked", HookEvent::ModelReplied).ranked(1),
    EventRow::open("onAfterLLM", HookEvent::ModelReplied).ranked(2),
    on("onToolInvokeStart", &TOOL_VET),
    EventRow::open("onToolExecuting", HookEvent::ToolExecuting),
    on("onToolInvokeEnd", &TOOL_AFTER_CHAIN),
    on("onAfterTool", &TOOL_AFTER_CHAIN).ranked(1),
    EventRow::open("onBeforeSendResponse", HookEvent::ResponseBeforeSend),
    EventRow::open("onResponsePersist", HookEvent::ResponsePersisted),
    EventRow::open("onTurnAborted", HookEvent::TurnEnded),
    EventRow::open("onTurnInterrupted", HookEvent::TurnEnded),
    EventRow::open("onError", HookEvent::TurnEnded),
    on("onScheduledRunGate", &SCHEDULED_RUN_GATE),
    on("onScheduledRunAutoDisabled", &SCHEDULED_RUN_AUTO_DISABLED),
    on("onConfigReload", &CONFIG_RELOAD),
    // P2 (`/new`, `/clear`: explicit removal) and P14 (unloaded).
    EventRow::open("onSessionEvict", HookEvent::SessionCleared),
    EventRow::open("onSessionEvict", HookEvent::SessionClosing),
];
