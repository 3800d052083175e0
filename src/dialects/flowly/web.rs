//! The built-in `web_search` and `web_extract` tools (Flowly's), served by
//! Python web providers; the agent's tools offer them (owner `builtin`)
//! and report on them (`WebReport`).
//!
//! Web backends are Python: `kind: backend` plugins register
//! `WebSearchProvider`s (the bundled `web-*` plugins among them), and the
//! provider registry of `flowly.agent.tools.web_providers` picks the active
//! one per capability from `tools.web.search.*` in `config.json`. These
//! tools hand each call to the Python side (`_plughost_web`), which awaits
//! `async def` provider methods, runs sync ones in a worker thread and
//! formats the answer as Flowly does.
//!
//! A tool is available only while a provider for its capability is: its
//! check asks the registry, so the agent offers it only then, and a call
//! made anyway is [`Unavailability::Unmet`] with the reason (no provider
//! registered, or which key or package each one lacks).
//!
//! `web_extract` refuses private, loopback and link-local addresses
//! (Flowly's rule and messages) unless `tools.web.allowPrivateUrls` is
//! `true` in `config.json`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::core::hooks::ToolCallContext;
use crate::core::outcome::{PluginError, Unavailability};
use crate::core::registry::{Tool, ToolHandler, ToolReturn};
use crate::dialects::flowly::handlers::result_text;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, try_attach, Runtime};

/// Which provider method a tool dispatches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Capability {
    Search,
    Extract,
}

impl Capability {
    fn name(self) -> &'static str {
        match self {
            Capability::Search => "search",
            Capability::Extract => "extract",
        }
    }

    /// The `_plughost_web` coroutine function serving the tool.
    fn function(self) -> &'static str {
        match self {
            Capability::Search => "web_search",
            Capability::Extract => "web_extract",
        }
    }
}

/// `web_search` and `web_extract` for the host whose home is `home` (its
/// `config.json` holds the providers' settings), registered by `owner`.
pub fn web_tools(home: &Path, owner: &str) -> Vec<Tool> {
    let tool = |capability, name: &str, description: &str, parameters: Value| {
        Tool::new(
            crate::core::registry::ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters,
                plugin: owner.into(),
                ..Default::default()
            },
            Arc::new(WebTool {
                capability,
                home: home.to_path_buf(),
                why_not: Mutex::new(String::new()),
            }),
        )
    };
    vec![
        tool(
            Capability::Search,
            "web_search",
            "Search the web. Returns titles, URLs, snippets, and enriched metadata.",
            json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Search query"},
                "count": {"type": "integer", "description": "Results (1-10)", "minimum": 1, "maximum": 10}},
                "required": ["query"]}),
        ),
        tool(
            Capability::Extract,
            "web_extract",
            "Read TWO OR MORE web pages in ONE call — pass a list of URLs. Returns clean readable content per URL via the configured extract backend (Exa / Firecrawl / Tavily / Parallel; local readability as fallback).",
            json!({"type": "object", "properties": {
                "urls": {"type": "array", "items": {"type": "string"}, "description": "One or more URLs to extract content from"},
                "query": {"type": "string", "description": "Optional query for relevance-focused extraction"},
                "format": {"type": "string", "enum": ["markdown", "html"], "description": "Preferred content format"},
                "maxChars": {"type": "integer", "minimum": 100, "description": "Per-URL content character cap"}},
                "required": ["urls"]}),
        ),
    ]
}

struct WebTool {
    capability: Capability,
    home: PathBuf,
    /// Why the last check said no, for [`ToolHandler::unavailability`].
    why_not: Mutex<String>,
}

impl WebTool {
    fn home(&self) -> String {
        self.home.display().to_string()
    }

    /// None when a provider can serve the capability, else why not.
    fn unmet(&self) -> Result<Option<String>, PluginError> {
        if Runtime::get().is_none() {
            return Ok(Some(
                "no web backend plugin is loaded (the bundled web-* plugins provide them)".into(),
            ));
        }
        try_attach(|py| {
            let web = web_module(py)?;
            let said = web
                .call_method1("unavailable", (self.home(), self.capability.name()))
                .map_err(|e| plugin_error(py, &e))?;
            said.extract::<Option<String>>()
                .map_err(|e| plugin_error(py, &e))
        })
        .map_err(|e| PluginError::native(e.to_string()))?
    }
}

/// `_plughost_web`, with the `flowly` modules it reaches installed.
fn web_module(py: Python<'_>) -> Result<Bound<'_, PyAny>, PluginError> {
    crate::dialects::flowly::classes(py).map_err(|e| plugin_error(py, &e))?;
    py.import("_plughost_web")
        .map(Bound::into_any)
        .map_err(|e| plugin_error(py, &e))
}

impl ToolHandler for WebTool {
    fn check(&self) -> Option<Result<bool, PluginError>> {
        Some(self.unmet().map(|unmet| match unmet {
            None => true,
            Some(reason) => {
                *self.why_not.lock().expect("why_not lock") = reason;
                false
            }
        }))
    }

    fn unavailability(&self) -> Unavailability {
        Unavailability::Unmet {
            problem: self.why_not.lock().expect("why_not lock").clone(),
        }
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let arguments = Value::Object(ctx.params.clone()).to_string();
        let called = try_attach(|py| {
            let started = web_module(py).and_then(|web| {
                web.call_method1(self.capability.function(), (self.home(), arguments))
                    .map_err(|e| plugin_error(py, &e))
            });
            match started {
                Err(e) => ToolReturn::Ready(Err(e)),
                Ok(coroutine) => match bridge::resolve(py, coroutine) {
                    Awaited::Ready(r) => ToolReturn::Ready(text(py, r)),
                    Awaited::Pending(task) => ToolReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        try_attach(|py| text(py, r))
                            .unwrap_or_else(|e| Err(PluginError::native(e.to_string())))
                    })),
                },
            }
        });
        called.unwrap_or_else(|e| ToolReturn::Ready(Err(PluginError::native(e.to_string()))))
    }
}

fn text(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<String, PluginError> {
    match r {
        Ok(v) => result_text(py, v.bind(py)),
        Err(e) => Err(plugin_error(py, &e)),
    }
}

/// One registered provider as doctor shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProviderState {
    pub name: String,
    pub display_name: String,
    /// The plugin that registered it (its manifest's `provides_web_providers`).
    #[serde(default)]
    pub plugin: Option<String>,
    pub available: bool,
    /// Why it is unavailable ("" when available).
    pub reason: String,
}

/// The providers of one capability (`search` or `extract`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CapabilityState {
    /// The provider the tool uses now, if one is available.
    pub active: Option<String>,
    /// A configured provider (`backend`, `searchBackend`, ...) that is
    /// chosen but unavailable: the tool says what it lacks.
    pub configured: Option<String>,
    pub providers: Vec<ProviderState>,
}

/// Per capability, from the Python registry; None when Python is not
/// running (no plugin loaded).
pub fn provider_states(home: &Path) -> Option<Result<(CapabilityState, CapabilityState), String>> {
    Runtime::get()?;
    let said = try_attach(|py| -> Result<String, String> {
        let web = web_module(py).map_err(|e| e.described())?;
        web.call_method1("report", (home.display().to_string(),))
            .and_then(|r| r.extract())
            .map_err(|e| plugin_error(py, &e).described())
    });
    #[derive(Deserialize)]
    struct Both {
        search: CapabilityState,
        extract: CapabilityState,
    }
    Some(
        said.map_err(|e| e.to_string())
            .and_then(|r| r)
            .and_then(|text| serde_json::from_str::<Both>(&text).map_err(|e| e.to_string()))
            .map(|b| (b.search, b.extract)),
    )
}
