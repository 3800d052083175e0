//! The per-turn objects Codumentor handlers share: one `ctx` dict and one
//! `agent` facade per turn (§2.5, §7 D7; see `points` for where they are
//! made), and the tools plugins register during turns through
//! `agent.tool_registry.register_tool` ([`runtime_tool`]).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

use super::{installed, per_home, INSTALLED};
use crate::core::hooks::ToolCallContext;
use crate::core::outcome::{PluginError, Renderer, StandardRenderer, ToolOutcome};
use crate::core::registry::{Tool, ToolHandler, ToolReturn, ToolSpec};
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::value::to_json;
use crate::runtime::{plugin_error, try_attach};

/// The per-turn Python objects handlers share.
pub struct Turn {
    agent: Py<PyAny>,
    ctx: Py<PyDict>,
    ui_events: Py<PyList>,
}

/// Who a turn belongs to (the `ctx` keys and the agent facade).
pub struct TurnInfo<'a> {
    pub session_id: &'a str,
    pub user_id: &'a str,
    pub channel: &'a str,
    pub model: &'a str,
    /// `main`, or `subagent` for a delegate.
    pub kind: &'a str,
}

/// Whether any Codumentor plugin subscribed in the host at `home`.
pub fn active(home: &Path) -> bool {
    crate::runtime::Runtime::get().is_some()
        && try_attach(|py| {
            INSTALLED.get(py).is_some()
                && per_home(py, home)
                    .and_then(|(table, _)| table.getattr("entries")?.len())
                    .is_ok_and(|n| n > 0)
        })
        .unwrap_or(false)
}

impl Turn {
    /// The objects of a new turn; `None` when no Codumentor plugin is loaded.
    pub fn start(home: &Path, info: TurnInfo<'_>) -> Option<Turn> {
        if !active(home) {
            return None;
        }
        // Only a source of unique turn ids, not state shared by hosts.
        static TURNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let turn_id = format!(
            "turn-{}-{}",
            std::process::id(),
            TURNS.fetch_add(1, Ordering::Relaxed) + 1
        );
        let made = try_attach(|py| -> PyResult<Turn> {
            let module = installed(py)?.module.bind(py);
            let (_, host) = per_home(py, home)?;
            let made = module.getattr("new_turn")?.call1((
                home.to_string_lossy().as_ref(),
                host,
                info.session_id,
                turn_id.as_str(),
                info.user_id,
                info.channel,
                info.model,
                info.kind,
            ))?;
            let (agent, ctx, ui): (Bound<'_, PyAny>, Bound<'_, PyDict>, Bound<'_, PyList>) =
                made.extract()?;
            Ok(Turn {
                agent: agent.unbind(),
                ctx: ctx.unbind(),
                ui_events: ui.unbind(),
            })
        });
        match made {
            Ok(Ok(turn)) => Some(turn),
            Ok(Err(e)) => {
                tracing::warn!("could not set up the Codumentor turn objects: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// The turn's `agent` facade and `ctx` dict.
    pub fn objects(&self) -> Option<(Py<PyAny>, Py<PyAny>)> {
        try_attach(|py| (self.agent.clone_ref(py), self.ctx.clone_ref(py).into_any())).ok()
    }

    /// The list `ctx["ui_event_emitter"]` appends to.
    pub fn ui_list<'py>(&self, py: Python<'py>) -> Bound<'py, PyList> {
        self.ui_events.bind(py).clone()
    }

    /// `ctx["step"]`: the current iteration, 1-based.
    pub fn set_step(&self, step: u32) {
        let _ = try_attach(|py| self.ctx.bind(py).set_item("step", step));
    }
}

/// The `PluginError` kind of a `ToolResult(success=False)`: its text is
/// `llm_content()`, shown to the model as it is.
const TOOL_RESULT_FAILED: &str = "codumentor.ToolResult";

/// Renders a failed `ToolResult` as its own `llm_content()`; every other
/// outcome in the standard strings.
struct ToolResultRenderer;

impl Renderer for ToolResultRenderer {
    fn render(&self, tool: &str, outcome: &ToolOutcome) -> String {
        match outcome {
            ToolOutcome::Raised { error } if error.kind == TOOL_RESULT_FAILED => {
                error.message.clone()
            }
            other => StandardRenderer.render(tool, other),
        }
    }
}

/// How a tool of `agent.tool_registry` renders its outcomes (an isolated
/// plugin's too).
pub fn tool_result_renderer() -> Arc<dyn Renderer> {
    Arc::new(ToolResultRenderer)
}

/// A tool registered through `agent.tool_registry` in the host at `home`,
/// as a core tool: the dispatch pipeline (schema validation, every
/// dialect's tool hooks) runs it like any other.
pub fn runtime_tool(home: &Path, name: &str) -> Option<Tool> {
    crate::runtime::Runtime::get()?;
    let home_s = home.to_string_lossy().into_owned();
    let definition = try_attach(|py| -> PyResult<Option<(String, Value, String)>> {
        let Some(m) = INSTALLED.get(py) else {
            return Ok(None);
        };
        let found = m
            .module
            .bind(py)
            .getattr("tool_definition")?
            .call1((&home_s, name))?;
        if found.is_none() {
            return Ok(None);
        }
        let (description, schema, owner): (String, Bound<'_, PyAny>, String) = found.extract()?;
        Ok(Some((description, to_json(&schema)?, owner)))
    });
    let (description, parameters, owner) = match definition {
        Ok(Ok(Some(d))) => d,
        Ok(Err(e)) => {
            tracing::warn!("tool '{name}' of agent.tool_registry cannot be described: {e}");
            return None;
        }
        _ => return None,
    };
    let spec = ToolSpec {
        name: name.to_string(),
        description,
        parameters,
        plugin: owner,
        ..Default::default()
    };
    let mut tool = Tool::new(
        spec,
        Arc::new(RuntimeTool {
            home: home_s,
            name: name.to_string(),
        }),
    );
    tool.renderer = Some(Arc::new(ToolResultRenderer));
    Some(tool)
}

struct RuntimeTool {
    home: String,
    name: String,
}

impl ToolHandler for RuntimeTool {
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let started = try_attach(|py| -> PyResult<Awaited> {
            let m = installed(py)?.module.bind(py);
            // D17: the validated arguments plus the call's id, set on the
            // Python dict itself (a key already there keeps its place, as
            // on a map): the arguments are not copied to add it.
            let args = pythonize::pythonize(py, &ctx.params)?.cast_into::<PyDict>()?;
            args.set_item("tool_call_id", &ctx.tool_call_id)?;
            let coro = m
                .getattr("run_tool")?
                .call1((&self.home, &self.name, args))?;
            Ok(bridge::resolve(py, coro))
        });
        let finish = |r: PyResult<Py<PyAny>>| -> Result<String, PluginError> {
            try_attach(|py| match r {
                Ok(v) => match v.bind(py).extract::<(String, bool)>() {
                    Ok((text, true)) => Ok(text),
                    Ok((text, false)) => Err(PluginError {
                        kind: TOOL_RESULT_FAILED.into(),
                        message: text,
                        ..Default::default()
                    }),
                    Err(e) => Err(plugin_error(py, &e)),
                },
                Err(e) => Err(plugin_error(py, &e)),
            })
            .unwrap_or_else(|e| Err(PluginError::native(e.to_string())))
        };
        match started {
            Ok(Ok(Awaited::Ready(r))) => ToolReturn::Ready(finish(r)),
            Ok(Ok(Awaited::Pending(task))) => {
                ToolReturn::Pending(Box::pin(async move { finish(task.await) }))
            }
            Ok(Err(e)) => ToolReturn::Ready(finish(Err(e))),
            Err(e) => ToolReturn::Ready(Err(PluginError::native(e.to_string()))),
        }
    }
}
