//! The core: plain Rust, no Python. The hook bus and its firing policies
//! ([`hooks`], [`dispatch`]), the registry of tools, hooks, commands and
//! skills ([`registry`]) and typed outcomes ([`outcome`]). Dialects adapt
//! their plugin APIs onto it; a Rust service registers native parts beside them.

pub mod agent_link;
pub mod bus;
pub mod commands;
pub mod contexts;
pub mod decisions;
pub mod dispatch;
pub mod extensions;
pub mod fire;
pub mod hooks;
pub mod lanes;
pub mod outcome;
pub mod pipeline;
pub mod points;
pub mod registry;
