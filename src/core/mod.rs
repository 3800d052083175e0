//! The core: plain Rust, no Python. The event model ([`hooks`] re-exports
//! it: [`points`] are the places of the loop, each a few lanes whose
//! policies are the rows of [`lanes`]; [`fire`] fires a lane; the tool
//! [`pipeline`] and the turn's [`loop_points`] fire a point and get its
//! combined, typed answer), the registry of tools, hooks, commands and
//! skills ([`registry`]) and typed outcomes ([`outcome`]). Dialects adapt
//! their plugin APIs onto it; a Rust service registers native parts beside them.

pub mod agent_link;
pub mod bus;
pub mod callbacks;
pub mod commands;
pub mod contexts;
pub mod decisions;
pub mod dispatch;
pub mod extensions;
pub mod fire;
pub mod hooks;
pub mod http_app;
pub mod lanes;
pub mod loop_points;
pub mod mcp;
pub mod model_profiles;
pub mod observers;
pub mod outcome;
pub mod pipeline;
pub mod points;
pub mod reference;
pub mod registry;
pub mod schedule;
pub mod scheduled_run;
pub mod wait;
pub mod wrappers;
