//! plughost's integration tests, one binary: each file here is the module
//! of one subject (a dialect, serve, isolation, reload, …), and the helpers
//! they share are `common` (homes, plugins on disk, the built binary),
//! `alloc_count`, `mcp_client_common` and `replicas_common`. One binary
//! links the crate and libpython once instead of ninety times; the tests
//! that change what the whole process shares are in `tests/process_wide`.
//!
//! Run one subject with its module name: `cargo test --test suite hermes_`.
#![deny(clippy::undocumented_unsafe_blocks)]

mod alloc_count;
mod answer_ready;
mod common;
mod gateway_common;
mod mcp_client_common;
mod replicas_common;

/// Counts each thread's live bytes, so a test can bound what its own work
/// held (`alloc_count::peak_during`); every other test pays a thread-local
/// add per allocation.
#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

mod agent_loop;
mod bundle;
mod bundle_claude;
mod bundle_claude_vars;
mod bundle_confine;
mod bundle_user_config;
mod bundled_io;
mod chat_interrupt;
mod claude_hooks;
mod claude_marketplace;
mod claude_plugin;
mod cli;
mod cli_help;
mod cli_snapshots;
mod codumentor;
mod codumentor_reload;
mod core_points;
mod disk_cleanup;
mod dispatch_native;
mod examples;
mod exec_tool;
mod felix;
mod felix_isolated_server;
mod felix_model_provider;
mod felix_rate_limit;
mod felix_server;
mod felix_upload;
mod file_tools;
mod flowly_parity;
mod gateway;
mod gateway_actions;
mod hermes;
mod hermes_browser;
mod hermes_children;
mod hermes_cli_output;
mod hermes_compat;
mod hermes_compat_hosted;
mod hermes_context;
mod hermes_context_engine;
mod hermes_corpus_compat;
mod hermes_dist;
mod hermes_doctor;
mod hermes_inject;
mod hermes_install;
mod hermes_manifest_v2;
mod hermes_mcp_tool;
mod hermes_members;
mod hermes_memory;
mod hermes_memory_dist;
mod hermes_middleware;
mod hermes_middleware_across;
mod hermes_model_provider;
mod hermes_model_provider_url;
mod hermes_operator;
mod hermes_order;
mod hermes_providers;
mod hermes_rest;
mod hermes_stream_hooks;
mod hermes_survey_gaps;
mod hermes_tools;
mod iso_parity;
mod isolated_dialects;
mod isolation;
mod isolation_batch;
mod isolation_cancel;
mod isolation_main_process;
mod layout;
mod lifecycle;
mod manifest_and_discovery;
mod mcp_client;
mod mcp_client_call;
mod mcp_client_headers;
mod mcp_client_serve;
mod openai_stub;
mod perf_paths;
mod plugin_bytecode;
mod plugin_deps;
mod plugin_deps_risk;
mod plugin_lock;
mod plugins_enable_check;
mod properties_config_manifest;
mod provider_hardening;
mod python_plugins;
mod readme;
mod reliability_blocked;
mod reliability_crash;
mod reliability_descriptors;
mod reliability_fuzz;
mod reliability_guard;
mod reliability_hangs;
mod reliability_mcp_edges;
mod reliability_plugins;
mod reliability_serve;
mod reload;
mod reload_serve;
mod reload_server;
mod replicas;
mod replicas_edges;
mod replicas_isolated;
mod replicas_kept;
mod replicas_lease_lost;
mod replicas_state;
mod replicas_statements;
mod runtime_foundation;
mod sandbox;
mod sandbox_shutdown;
mod serve;
mod serve_hostile;
mod sessions;
mod sse_props;
mod values;
mod web_providers;
mod wrappers;
