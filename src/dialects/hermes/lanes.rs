//! Hermes's lanes: the hook names Hermes fires at a place of the loop no
//! core lane has. `pre_command` observes a recognised slash command before
//! its handler runs (`hermes_cli/plugins.py`: "returns IGNORED in v1").

use crate::core::hooks::{HookEvent, Lane, LaneId, Point, Policy};

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

/// Hermes's lanes, for the dialect table.
pub static LANES: &[&Lane] = &[&PRE_COMMAND];

/// The bus event of a Hermes hook name that is one of Hermes's lanes.
pub fn by_name(name: &str) -> Option<HookEvent> {
    LANES
        .iter()
        .find(|l| l.name == name)
        .map(|l| HookEvent::Lane(LaneId(l)))
}
