//! The lanes Claude Code plugins bring to the loop, and where each Claude
//! Code hook event fires ([`ClaudeEvent::lanes`]).
//!
//! Tool events need a policy of their own: every matching hook runs and
//! the first refusal wins (`PreToolUse`), and each hook's feedback is added
//! to the result the model sees (`PostToolUse`). The other events fire on
//! the core's lane of their point, found by the point
//! ([`Point::lanes`]), not by the lane's name.

use crate::core::hooks::{HookEvent, Lane, LaneId, Point, Policy};

/// `PreToolUse`: every matching hook runs; the first refusal (exit 2, a
/// `deny`) blocks the call, a `continue: false` ends the turn after the batch.
pub static PRE_TOOL_USE: Lane = Lane::plain(
    &PRE_TOOL_USE,
    "claude_pre_tool_use",
    Point::ToolBefore,
    3,
    Policy::Collect,
    "P9, third lane: Claude Code's PreToolUse command hooks, before a tool call; every matching hook runs, the first refusal blocks the call.",
);

/// `PostToolUse`: every matching hook runs after the call; what each feeds
/// back (exit 2's stderr, a `block` reason, `additionalContext`) is added
/// to the result the model sees.
pub static POST_TOOL_USE: Lane = Lane::plain(
    &POST_TOOL_USE,
    "claude_post_tool_use",
    Point::ToolAfter,
    3,
    Policy::Collect,
    "P10, third lane: Claude Code's PostToolUse command hooks, after the call ran; their feedback is added to the result.",
);

/// `Stop` and `SubagentStop` at the answer point: every hook runs; the
/// first `decision: "block"` (or exit 2) keeps the turn going with its
/// reason, as Claude Code feeds it back to the model.
pub static STOP: Lane = Lane::plain(
    &STOP,
    "claude_stop",
    Point::AnswerReady,
    3,
    Policy::FirstWins,
    "When the model's reply has no tool calls: Claude Code's Stop (a turn) and SubagentStop (a `delegate` sub-agent) command hooks; the first block keeps the turn going with its reason as a user message (`stop_hook_active` is true at the next answer), at most 3 times per turn.",
);

/// The bundle dialect's lanes, for the dialect table.
pub static LANES: &[&Lane] = &[
    &PRE_TOOL_USE,
    &POST_TOOL_USE,
    &STOP,
    &super::agents::AGENTS_OFFERED,
];

/// The Claude Code hook events plughost knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaudeEvent {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    SessionStart,
    SessionEnd,
    Stop,
    SubagentStop,
    PreCompact,
}

impl ClaudeEvent {
    pub const ALL: [ClaudeEvent; 8] = [
        ClaudeEvent::PreToolUse,
        ClaudeEvent::PostToolUse,
        ClaudeEvent::UserPromptSubmit,
        ClaudeEvent::SessionStart,
        ClaudeEvent::SessionEnd,
        ClaudeEvent::Stop,
        ClaudeEvent::SubagentStop,
        ClaudeEvent::PreCompact,
    ];

    /// Claude Code's name (`PreToolUse`).
    pub fn name(self) -> &'static str {
        match self {
            ClaudeEvent::PreToolUse => "PreToolUse",
            ClaudeEvent::PostToolUse => "PostToolUse",
            ClaudeEvent::UserPromptSubmit => "UserPromptSubmit",
            ClaudeEvent::SessionStart => "SessionStart",
            ClaudeEvent::SessionEnd => "SessionEnd",
            ClaudeEvent::Stop => "Stop",
            ClaudeEvent::SubagentStop => "SubagentStop",
            ClaudeEvent::PreCompact => "PreCompact",
        }
    }

    pub fn from_name(name: &str) -> Option<ClaudeEvent> {
        ClaudeEvent::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The lanes the event's hooks are subscribed to: its own lane, or the
    /// core's lanes of its point (`SessionEnd` fires on both a reset and a
    /// session's end).
    pub fn lanes(self) -> Vec<HookEvent> {
        let core = |p: Point| p.lanes()[0];
        match self {
            ClaudeEvent::PreToolUse => vec![HookEvent::Lane(LaneId(&PRE_TOOL_USE))],
            ClaudeEvent::PostToolUse => vec![HookEvent::Lane(LaneId(&POST_TOOL_USE))],
            // The turn's history is assembled: the prompt is the last user message.
            ClaudeEvent::UserPromptSubmit => vec![core(Point::HistoryReady)],
            ClaudeEvent::SessionStart => vec![core(Point::SessionStart)],
            ClaudeEvent::SessionEnd => {
                vec![core(Point::SessionReset), core(Point::SessionFinalize)]
            }
            // At the answer (where a block continues the turn), and at the
            // turn's own end lane (the point's last) for a turn that ended
            // otherwise (a short-circuit, an error, the iteration cap).
            ClaudeEvent::Stop => vec![
                HookEvent::Lane(LaneId(&STOP)),
                *Point::TurnEnded.lanes().last().expect("a lane"),
            ],
            ClaudeEvent::SubagentStop => {
                vec![HookEvent::Lane(LaneId(&STOP)), core(Point::SubagentStop)]
            }
            ClaudeEvent::PreCompact => vec![core(Point::Compaction)],
        }
    }

    /// Why hooks of Claude Code's event `name` never fire in plughost;
    /// `None` for the events above.
    pub fn never_fires(name: &str) -> Option<&'static str> {
        if ClaudeEvent::from_name(name).is_some() {
            return None;
        }
        Some(match name {
            "Notification" | "PermissionRequest" => {
                "plughost asks no permissions and sends no notifications: it never fires"
            }
            _ => "not a Claude Code hook event plughost fires",
        })
    }
}
