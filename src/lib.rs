//! plughost: run Python agent plugins unmodified inside a Rust agent loop.
//!
//! The core — [`registry`], [`hooks`], [`dispatch`] — is plain Rust; Python
//! enters only through [`python`] and [`dialects`]. [`host::Host`] ties
//! discovery, loading and dispatch together for services and the CLI.
pub mod agent;
pub mod bundled;
pub mod cli;
pub mod config;
pub mod dialects;
pub mod discovery;
pub mod dispatch;
pub mod doctor;
pub mod hooks;
pub mod host;
pub mod install;
pub mod logging;
pub mod manifest;
pub mod python;
pub mod registry;

pub use dispatch::{ToolOutcome, ToolResult};
pub use hooks::{HookAction, HookEvent, HookPayload};
pub use host::{Host, HostBuilder, PluginRecord};
pub use registry::Tool;
