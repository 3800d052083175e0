//! A provider's own tools (a memory provider's or a context engine's
//! `get_tool_schemas()`) as registry tools whose handler is its
//! `handle_tool_call`, through the compat module's `_plughost_tool`
//! helper. Read when the provider is activated: plughost's tool table is
//! fixed once the host is built.

use std::sync::Arc;

use pyo3::prelude::*;
use serde_json::Value;

use crate::core::extensions::Extensions;
use crate::core::registry::{Registration, Tool, ToolSpec};

use super::handlers::HermesTool;
use super::render::HermesRenderer;

/// Which provider the tools come from, for their registrations and logs.
pub struct ProviderTools<'a> {
    /// The plugin that registered the provider.
    pub plugin: &'a str,
    /// The provider object whose `handle_tool_call` backs each tool.
    pub provider: &'a Py<PyAny>,
    /// What it is and its name, for a warning (`memory provider 'x'`).
    pub what: &'a str,
    pub name: &'a str,
    /// The compat module holding `_plughost_tool` (`agent.memory_provider`).
    pub helper_module: &'a str,
    /// The toolset the tools are listed under.
    pub toolset: &'a str,
}

impl ProviderTools<'_> {
    /// `schemas` (what `get_tool_schemas()` returned, as JSON) as tools; a
    /// schema without a name is skipped with a warning.
    pub fn registrations(
        &self,
        py: Python<'_>,
        host: &Arc<Extensions>,
        schemas: &Value,
    ) -> PyResult<Vec<Registration>> {
        let helper = py.import(self.helper_module)?.getattr("_plughost_tool")?;
        let mut out = Vec::new();
        for schema in schemas.as_array().into_iter().flatten() {
            // `{"name", "description", "parameters"}`, or wrapped as a function tool.
            let schema = schema.get("function").unwrap_or(schema);
            let Some(tool_name) = schema["name"].as_str().filter(|n| !n.is_empty()) else {
                tracing::warn!(
                    "{} '{}': a tool schema without a name; skipped",
                    self.what,
                    self.name
                );
                continue;
            };
            let (parameters, description) = crate::dialects::flowly::normalize_schema(schema);
            let handler = helper.call1((self.provider.bind(py), tool_name))?;
            let handler =
                HermesTool::new(py, handler.unbind(), None, Vec::new(), Arc::clone(host))?;
            let mut tool = Tool::new(
                ToolSpec {
                    name: tool_name.to_string(),
                    description,
                    parameters,
                    plugin: self.plugin.to_string(),
                    toolset: self.toolset.to_string(),
                    ..Default::default()
                },
                Arc::new(handler),
            );
            tool.renderer = Some(Arc::new(HermesRenderer));
            out.push(Registration::Tool(tool));
        }
        Ok(out)
    }
}
