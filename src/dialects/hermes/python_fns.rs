//! The functions of `_plughost_hermes` that the compat Hermes modules
//! call (`tools.registry.registry.dispatch`, `ctx.llm`'s model call and
//! its JSON Schema checks, YAML parsing).

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;

use super::context::HermesContext;

/// `tools.registry.registry.dispatch`: as `ctx.dispatch_tool`.
#[pyfunction]
pub fn dispatch_tool(
    py: Python<'_>,
    name: String,
    args: &Bound<'_, PyAny>,
    task_id: String,
) -> PyResult<String> {
    let args = if args.is_none() {
        Value::Object(Default::default())
    } else {
        crate::runtime::value::to_json(args).map_err(|e| {
            PyValueError::new_err(format!("dispatch('{name}'): args are not JSON-like: {e}"))
        })?
    };
    // The host of the tool call running now (none outside one).
    let host = super::link::calling_turn(py)
        .map(|(host, _)| host)
        .unwrap_or_default();
    Ok(py.detach(|| super::link::dispatch_tool(&host, &name, args, &task_id)))
}

/// The session of the tool call running now (`None` outside one): the
/// parent a `subagent_lifecycle.launch` needs.
#[pyfunction]
pub fn calling_session(py: Python<'_>) -> Option<String> {
    super::link::calling_turn(py).map(|(_, session)| session)
}

/// The MCP servers of the calling host (the tool call running now, else
/// the plugin loading now) as `tools.mcp_tool` reports them: a list of
/// `{name, transport, state, tools, last_error}`; `None` outside both. In
/// a worker the host that loaded the plugin answers.
#[pyfunction]
pub fn mcp_servers(py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
    let host = match super::link::calling_turn(py) {
        Some((host, _)) => host,
        None => {
            let current = py.import("_plughost_hermes")?.getattr("_CURRENT")?;
            match current.cast::<HermesContext>() {
                Ok(ctx) => Arc::clone(&ctx.get().host),
                Err(_) => return Ok(None),
            }
        }
    };
    let servers = match crate::dialects::host_calls::bridge(&host) {
        Some(bridge) => py
            .detach(move || bridge.call(crate::dialects::host_calls::HostCall::McpServers))
            .map_err(PyRuntimeError::new_err)?,
        None => host_mcp_servers(&host),
    };
    Ok(Some(pythonize::pythonize(py, &servers)?.unbind()))
}

/// `host`'s MCP servers as [`mcp_servers`] reports them (empty before
/// they connect).
pub(super) fn host_mcp_servers(host: &crate::core::extensions::Extensions) -> Value {
    let servers = host
        .peek::<crate::core::mcp::McpSlot>()
        .and_then(|slot| slot.get())
        .map(|calls| calls.servers())
        .unwrap_or_default();
    serde_json::to_value(&servers).unwrap_or(Value::Array(Vec::new()))
}

/// `hermes_cli.config.load_config`'s parser: YAML `text` (of the file
/// `path`, named in errors) as Python values.
#[pyfunction]
pub fn parse_yaml(py: Python<'_>, text: &str, path: &str) -> PyResult<Py<PyAny>> {
    if text.trim().is_empty() {
        return Ok(PyDict::new(py).into_any().unbind());
    }
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| PyValueError::new_err(format!("{path} is not valid YAML: {e}")))?;
    Ok(pythonize::pythonize(py, &value)?.unbind())
}

/// `ctx.llm`'s backend: `messages` to the agent's model for `plugin`,
/// with `params` (`temperature`, `max_tokens`, `response_format`, …)
/// merged into the request; `(text, "provider:model", usage)`. Raises
/// `RuntimeError` when no agent runs or the model call fails.
#[pyfunction]
#[pyo3(signature = (plugin, messages, params=None, ctx=None))]
pub fn llm_complete(
    py: Python<'_>,
    plugin: String,
    messages: &Bound<'_, PyAny>,
    params: Option<&Bound<'_, PyAny>>,
    ctx: Option<&Bound<'_, PyAny>>,
) -> PyResult<(String, String, Py<PyAny>)> {
    // The host of the plugin's context, else of the tool call running now.
    let host = ctx
        .and_then(|c| c.cast::<HermesContext>().ok())
        .map(|c| Arc::clone(&c.get().host))
        .or_else(|| super::link::calling_turn(py).map(|(host, _)| host))
        .unwrap_or_default();
    let messages = match crate::runtime::value::to_json(messages) {
        Ok(Value::Array(m)) => m,
        Ok(_) => {
            return Err(PyTypeError::new_err(
                "ctx.llm.complete: messages must be a list of {\"role\", \"content\"} dicts",
            ))
        }
        Err(e) => {
            return Err(PyValueError::new_err(format!(
                "ctx.llm.complete: messages are not JSON-like: {e}"
            )))
        }
    };
    let params = match params
        .filter(|p| !p.is_none())
        .map(crate::runtime::value::to_json)
    {
        None => serde_json::Map::new(),
        Some(Ok(Value::Object(p))) => p,
        Some(Ok(_)) => {
            return Err(PyTypeError::new_err(
                "ctx.llm: request parameters must be a dict",
            ))
        }
        Some(Err(e)) => {
            return Err(PyValueError::new_err(format!(
                "ctx.llm: request parameters are not JSON-like: {e}"
            )))
        }
    };
    let done = py.detach(|| super::link::complete(&host, &plugin, messages, params));
    let c = done.map_err(PyRuntimeError::new_err)?;
    let usage = pythonize::pythonize(py, &Value::Object(c.usage))?.unbind();
    Ok((c.text, c.model, usage))
}

/// `ctx.llm.complete_structured`'s check of the caller's `json_schema`
/// before the model is asked: `ValueError` naming the problem.
#[pyfunction]
pub fn check_schema(schema: &Bound<'_, PyAny>) -> PyResult<()> {
    json_schema_validator(schema).map(|_| ())
}

fn json_schema_validator(schema: &Bound<'_, PyAny>) -> PyResult<jsonschema::Validator> {
    let schema = crate::runtime::value::to_json(schema)
        .map_err(|e| PyValueError::new_err(format!("json_schema is not JSON-like: {e}")))?;
    jsonschema::validator_for(&schema)
        .map_err(|e| PyValueError::new_err(format!("json_schema is not a valid JSON Schema: {e}")))
}

/// `ctx.llm.complete_structured`'s check of a parsed answer against the
/// caller's JSON Schema: the first problem (with where it is), or `None`.
/// A `schema` that is not a JSON Schema raises `ValueError` saying so.
#[pyfunction]
pub fn schema_problem(
    instance: &Bound<'_, PyAny>,
    schema: &Bound<'_, PyAny>,
) -> PyResult<Option<String>> {
    let validator = json_schema_validator(schema)?;
    let instance = crate::runtime::value::to_json(instance)
        .map_err(|e| PyValueError::new_err(format!("the parsed answer is not JSON-like: {e}")))?;
    let problem = validator.iter_errors(&instance).next().map(|error| {
        let path = error.instance_path().to_string();
        if path.is_empty() {
            error.to_string()
        } else {
            format!("{error} (at {path})")
        }
    });
    Ok(problem)
}

/// `ctx.set_config`'s writer: `value_json` at
/// `plugins.entries.<plugin>.settings.<segments…>` of plughost's
/// `config.json` in `home`, under the config lock and replaced whole (as
/// `plugins enable` writes it); every other key is kept. Hermes's own
/// `config.yaml` is never written.
#[pyfunction]
pub fn write_plugin_setting(
    home: std::path::PathBuf,
    plugin: String,
    segments: Vec<String>,
    value_json: String,
) -> PyResult<()> {
    let value: Value = serde_json::from_str(&value_json)
        .map_err(|e| PyValueError::new_err(format!("set_config: the value is not JSON: {e}")))?;
    let io = |e: std::io::Error| PyRuntimeError::new_err(format!("set_config: {e}"));
    let _held = crate::plugins::atomic::lock(&home, ".config.lock").map_err(io)?;
    let path = crate::plugins::config::config_path(&home);
    let mut doc: Value = match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => serde_json::from_str(&text).map_err(|e| {
            PyValueError::new_err(format!(
                "set_config: {} is not valid JSON: {e}",
                path.display()
            ))
        })?,
        Ok(_) => Value::Object(Default::default()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Object(Default::default()),
        Err(e) => return Err(io(e)),
    };
    let mut node = &mut doc;
    let path_keys = ["plugins", "entries", plugin.as_str(), "settings"];
    let all: Vec<&str> = path_keys
        .iter()
        .copied()
        .chain(segments.iter().map(String::as_str))
        .collect();
    let (last, parents) = all.split_last().expect("at least the fixed keys");
    for key in parents {
        let Value::Object(map) = node else {
            return Err(PyValueError::new_err(format!(
                "set_config: {} has a value that is not an object where '{key}' goes",
                path.display()
            )));
        };
        node = map
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    match node {
        Value::Object(map) => {
            map.insert(last.to_string(), value);
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "set_config: {} has a value that is not an object where '{last}' goes",
                path.display()
            )))
        }
    }
    let mut text = serde_json::to_string_pretty(&doc).expect("a JSON value serialises");
    text.push('\n');
    crate::plugins::atomic::replace(&path, &text).map_err(io)
}
