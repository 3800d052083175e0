//! The lanes Felix brings to the loop: where its hooks need a policy no
//! other lane at the point has; and its event rows ([`EVENTS`]): every
//! hook kind and the lane it fires on, its own or the core's.

use crate::core::hooks::{EventRow, HookEvent, Lane, LaneId, Point, Policy};

/// `before_turn`: every hook sees the same in-flight list; each append is
/// added after all ran.
pub static BEFORE_TURN: Lane = Lane::plain(
    &BEFORE_TURN,
    "iteration_start",
    Point::PromptAssembly,
    1,
    Policy::Collect,
    "P5, first lane: before every model call; appended messages are carried to later calls, never stored.",
);

/// `before_tool`: the first refusal stops the call and the hooks after it.
pub static BEFORE_TOOL: Lane = Lane::plain(
    &BEFORE_TOOL,
    "tool_before",
    Point::ToolBefore,
    1,
    Policy::StopAtFirst,
    "P9, first lane: before a tool call; the first refusal stops the call.",
);

/// `after_tool`: every hook sees the tool's own result; their answers are
/// merged, a later key winning ([`super::hooks`] decodes them).
pub static AFTER_TOOL: Lane = Lane::plain(
    &AFTER_TOOL,
    "tool_after",
    Point::ToolAfter,
    1,
    Policy::Merge,
    "P10, first lane: after the call ran; answers are merged, a later key winning.",
);

/// Felix's lanes, for the dialect table.
pub static LANES: &[&Lane] = &[&BEFORE_TURN, &BEFORE_TOOL, &AFTER_TOOL];

/// Felix's hook kinds that fire in plughost, each on its lane; every one
/// fails open (a failing hook is reported in `hook_errors` and skipped).
pub static EVENTS: &[EventRow] = &[
    EventRow::open("filter_history", HookEvent::HistoryReady),
    EventRow::open("before_turn", HookEvent::Lane(LaneId(&BEFORE_TURN))),
    EventRow::open("before_model", HookEvent::PromptFinal),
    EventRow::open("after_model", HookEvent::ModelReplied),
    EventRow::open("before_tool", HookEvent::Lane(LaneId(&BEFORE_TOOL))),
    EventRow::open("after_tool", HookEvent::Lane(LaneId(&AFTER_TOOL))),
    EventRow::open("before_compact", HookEvent::CompactBefore),
    EventRow::open("compact_failed", HookEvent::CompactFailed),
    EventRow::open("startup_hook", HookEvent::HostStart),
];
