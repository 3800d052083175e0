//! The core: plain Rust, no Python. The hook bus and its firing policies
//! ([`hooks`], [`dispatch`]), the registry of tools, hooks, commands and
//! skills ([`registry`]) and typed outcomes ([`outcome`]). Dialects adapt
//! their plugin APIs onto it; a Rust service registers native parts beside them.

pub mod commands;
pub mod agent_link;
pub mod dispatch;
pub mod extensions;
pub mod hooks;
pub mod outcome;
pub mod registry;
