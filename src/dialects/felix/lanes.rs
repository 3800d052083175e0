//! The lanes Felix brings to the loop: where its hooks need a policy no
//! other lane at the point has. Its other hook kinds fire on the core's
//! lanes ([`super::point_of`]).

use crate::core::hooks::{Lane, Point, Policy};

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
