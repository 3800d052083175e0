//! The members of Hermes's `PluginContext` whose work happens after
//! `register()` returns, kept in Python (`_plughost_hermes_ctx`) and
//! joined to the host here once the plugin has loaded:
//!
//! - `register_context_reference`: an [`HookEvent::InputReceived`] hook
//!   expands the plugin's `@<prefix>:<target>` references in each inbound
//!   user message, where Hermes expands them (before the turn).
//! - `register_terminal_environment_provider`: when `terminal.backend` of
//!   the Hermes `config.yaml` (or `TERMINAL_ENV`) names the plugin's
//!   backend, the plugin's `exec` (Hermes's `terminal`, same arguments)
//!   replaces the built-in and runs each command through the backend's
//!   environment (one per session), as Hermes's `terminal` does; hooks see
//!   it as they see the built-in.
//! - `subagent_lifecycle` needs no hook: it runs `delegate` sub-agents.
//!
//! `plugins doctor` prints, per plugin, its references and whether each of
//! its backends is active, with the reason when it is not.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::core::extensions::Extensions;
use crate::core::hooks::{
    HookAction, HookCallback, HookEntry, HookError, HookEvent, HookPayload, HookReturn, HookStats,
    LoopDecision, LoopEdit,
};
use crate::core::registry::{Registration, Tool, ToolSpec};
use crate::runtime::{plugin_error, try_attach};

/// The name of the hook that expands a plugin's references (its
/// registration's name; it fires, at P1).
pub const CONTEXT_REFERENCES: &str = "context_references";

/// What each plugin's members say in `plugins doctor` (key → lines).
#[derive(Default)]
struct Lines(Mutex<BTreeMap<String, Vec<String>>>);

/// The hooks and middleware the members of plugin `key` (whose
/// `PluginRuntime` is `runtime`) need on host `state`; records the doctor
/// lines on the way.
pub fn registrations(
    py: Python<'_>,
    state: &Arc<Extensions>,
    key: &str,
    runtime: &Bound<'_, PyAny>,
) -> PyResult<Vec<Registration>> {
    let mut out = Vec::new();
    super::platform::commit(state, key, runtime)?;
    let references: usize = runtime.getattr("_references")?.len()?;
    if references > 0 {
        out.push(Registration::Hook {
            event: Some(HookEvent::InputReceived),
            name: CONTEXT_REFERENCES.into(),
            entry: HookEntry {
                owner: key.to_string(),
                label: "context references".into(),
                priority: 0,
                callback: Arc::new(ContextReferences {
                    runtime: runtime.clone().unbind(),
                }),
                stats: Arc::new(HookStats::default()),
            },
        });
    }
    let handler = runtime.call_method0("terminal_handler")?;
    if !handler.is_none() {
        out.push(Registration::Tool(terminal_tool(py, state, key, handler)?));
    }
    let lines: Vec<String> = runtime.call_method0("doctor_lines")?.extract()?;
    let table = state.get::<Lines>();
    let mut map = table.0.lock().unwrap_or_else(|e| e.into_inner());
    if lines.is_empty() {
        map.remove(key);
    } else {
        map.insert(key.to_string(), lines);
    }
    Ok(out)
}

/// `exec` with the built-in's arguments, run by `handler` (the backend).
fn terminal_tool(
    py: Python<'_>,
    state: &Arc<Extensions>,
    key: &str,
    handler: Bound<'_, PyAny>,
) -> PyResult<Tool> {
    let handler = super::handlers::HermesTool::new(
        py,
        handler.unbind(),
        None,
        Vec::new(),
        Arc::clone(state),
    )?;
    let mut tool = Tool::new(
        ToolSpec {
            name: "exec".into(),
            description:
                "Run a shell command in the configured terminal backend; returns its output.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "cwd": {"type": "string", "description": "Directory (relative to the backend's working directory)"},
                "timeout": {"type": "number", "description": "Seconds"}}, "required": ["command"]}),
            plugin: key.to_string(),
            toolset: "terminal".into(),
            ..Default::default()
        },
        Arc::new(handler),
    );
    tool.terminal = true;
    tool.shadows_only_own_toolset = false;
    tool.renderer = Some(Arc::new(super::render::HermesRenderer));
    Ok(tool)
}

/// The doctor lines of plugin `key` on host `state`.
pub fn doctor_lines(state: &Extensions, key: &str) -> Vec<String> {
    state
        .peek::<Lines>()
        .and_then(|t| {
            t.0.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .cloned()
        })
        .unwrap_or_default()
}

/// Expands one plugin's `@<prefix>:` references in the inbound text (P1,
/// a chain: each edit is the text the next callback sees).
struct ContextReferences {
    runtime: Py<PyAny>,
}

impl HookCallback for ContextReferences {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let HookPayload::Loop(lc) = payload else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let done = try_attach(|py| {
            self.runtime
                .bind(py)
                .call_method1("expand_references", (lc.text.as_str(),))
                .and_then(|v| v.extract::<String>())
                .map_err(|e| HookError::Raised(plugin_error(py, &e)))
        });
        HookReturn::Ready(match done {
            Ok(Ok(text)) if text == lc.text => Ok(HookAction::Continue),
            // An edit decision, not an edit in place: it is what an
            // isolated plugin's worker sends back.
            Ok(Ok(text)) => Ok(HookAction::Decide(LoopDecision::Edit(LoopEdit::Text(text)))),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(HookError::NotRun(e.to_string())),
        })
    }
}
