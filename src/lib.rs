//! plughost: run Python agent plugins unmodified inside a Rust agent loop.
//!
//! The [`core`] — the registry ([`core::registry`]), the hook points and
//! their table of firing policies ([`core::hooks`]), the tool pipeline
//! ([`core::pipeline`]) and typed outcomes ([`core::outcome`]) — is plain
//! Rust. Python enters only through [`runtime`] (the one owner of the
//! interpreter, its threads and its asyncio loop) and [`dialects`] (one
//! adapter per plugin API). [`host::Host`], built from the runtime with its
//! own home, ties discovery, loading and dispatch together for services and
//! the CLI; [`agent::Agent`] runs the agent loop over a host; [`serve`]
//! puts both behind MCP and an OpenAI-compatible API; [`wheel`] is the
//! Python API of the pip-installable wheel.
//!
//! A host with the plugins of a home, a native Rust tool and a native hook:
//!
//! ```no_run
//! use plughost::core::hooks::{HookAction, HookEvent, HookPayload};
//! use plughost::{Host, Tool};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let host = Host::builder()
//!     .home("/srv/agent/plughost-home")
//!     .enable(["my-plugin"]) // user plugins are opt-in
//!     .tool(Tool::from_fn("add", "Add two numbers", json!({"type": "object"}), |a| {
//!         Ok((a["a"].as_f64().unwrap_or(0.0) + a["b"].as_f64().unwrap_or(0.0)).to_string())
//!     }))
//!     .hook(HookEvent::ToolGuard, |_e: HookEvent, p: HookPayload<'_>| match p {
//!         HookPayload::Tool(call) if call.tool_name == "rm" => HookAction::Block("not here".into()),
//!         _ => HookAction::Continue,
//!     })
//!     .build()?;
//! for plugin in &host.plugins() {
//!     println!("{} loaded={} {:?}", plugin.key, plugin.loaded, plugin.error);
//! }
//! let result = host.call_tool("add", json!({"a": 1, "b": 2}), "session-1").await;
//! assert_eq!(result.text, "3");
//! println!("{:?}", host.run_command("/help").await?);
//! println!("{}", host.skill("my-plugin:guide")?);
//! # Ok(()) }
//! ```
//!
//! The agent loop over it, with the built-in tools and a scripted model:
//!
//! ```no_run
//! use std::sync::Arc;
//! use plughost::agent::provider::{self, ProviderOptions};
//! use plughost::agent::tools::{builtin_tools, delegate_tool, DelegateSlot, ToolLimits, Workspace};
//! use plughost::agent::{Agent, AgentConfig, Inbound};
//! use plughost::Host;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let workspace = Workspace::new(std::path::Path::new("/srv/agent/workspace"))?;
//! let slot = DelegateSlot::default();
//! let mut builder = Host::builder();
//! for tool in builtin_tools(&workspace, &ToolLimits::default()) {
//!     builder = builder.tool(tool);
//! }
//! let host = Arc::new(builder.tool(delegate_tool(&slot)).build()?);
//! let model = provider::from_spec("scripted:demo", &ProviderOptions::default())?;
//! let agent = Agent::new(host, model, AgentConfig::default(), Some(&slot));
//! let report = agent.send(Inbound::new("session-1", "hello"), None).await;
//! println!("{}", report.reply.unwrap_or_default());
//! agent.shutdown().await;
//! # Ok(()) }
//! ```
#![deny(clippy::undocumented_unsafe_blocks)]

/// mimalloc for the wheel's Rust side, as for the binary (`src/main.rs`):
/// a tool call through `Host.acall_tool` allocates its future and its
/// arguments, and glibc's malloc took two locked instructions for each
/// block past its per-thread cache (a call's future is such a block).
/// Only in the wheel (the `extension-module` feature): a Rust service that
/// uses the library keeps its own allocator.
#[cfg(feature = "extension-module")]
#[global_allocator]
static WHEEL_ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The top-level modules, in alphabetical order (not layer order). The
// layers, lowest first, and which module uses which are described in
// docs/architecture.md; tests/suite/layout.rs checks that no import cycle
// between these modules exists and that `core` and `plugins` have no pyo3.

pub mod agent;
pub mod cli;
pub mod cluster;
pub mod core;
pub mod dialects;
pub mod event_reference;
pub mod gateway;
pub mod host;
pub mod isolation;
pub mod mcp_client;
pub mod plugins;
pub mod runtime;
pub mod serve;
pub mod wheel;

pub use crate::core::hooks::{HookAction, HookEvent, HookPayload};
pub use crate::core::outcome::{PluginError, ToolOutcome, ToolResult, Unavailability};
pub use crate::core::registry::Tool;
pub use host::{Host, HostBuilder, PluginRecord};
pub use runtime::Runtime;
