//! Hermes's context members of a plugin loaded in a worker process
//! (issue 47): both ends of [`crate::dialects::host_calls`] for Hermes.
//!
//! - In the worker, the plugin's bus is `_plughost_hermes_ctx.RemoteBus`:
//!   `emit` and `has_plugin` ask the host (their answers are the host's),
//!   a subscription is kept in the worker and announced to the host once
//!   per event, and the host delivers each event back to be run there, in
//!   order. `inject_message`, `dispatch_tool` and `llm` go to the host
//!   ([`super::link`] forwards them when its host state has a bridge).
//! - In plughost, [`serve`] runs each call on the host's own bus and link,
//!   exactly what the in-process member runs: an isolated plugin's event
//!   reaches in-process subscribers and other workers' alike, and an
//!   in-process plugin's event reaches the worker's subscribers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use serde_json::{json, Value};

use crate::core::extensions::Extensions;
use crate::dialects::host_calls::{Deliver, HostCall, HostCalls};

/// The worker subscriptions (plugin, event, index) the host's bus already
/// calls through a proxy (a restarted worker subscribes again).
#[derive(Default)]
struct Proxied(Mutex<HashSet<(String, String, usize)>>);

/// In plughost: run `call` of isolated plugin `plugin` on `host`.
pub fn serve(
    host: &Arc<Extensions>,
    plugin: &str,
    call: HostCall,
    deliver: Arc<dyn Deliver>,
) -> Result<Value, String> {
    match call {
        HostCall::Inject {
            session,
            content,
            role,
            session_key,
        } => Ok(Value::Bool(super::link::inject_for_session(
            host,
            &session,
            &content,
            &role,
            session_key.as_deref(),
        ))),
        HostCall::DispatchTool {
            tool,
            args,
            task_id,
        } => Ok(Value::String(super::link::dispatch_tool(
            host, &tool, args, &task_id,
        ))),
        HostCall::Complete { messages, params } => {
            let c = super::link::complete(host, plugin, messages, params)?;
            Ok(json!({"text": c.text, "model": c.model, "usage": c.usage}))
        }
        HostCall::Emit { event, payload } => on_bus(host, |py, bus| {
            let payload = pythonize::pythonize(py, &payload)?;
            bus.call_method1("dispatch", (event, payload))?
                .extract::<u64>()
                .map(Value::from)
        }),
        HostCall::Subscribe { event, index } => {
            let fresh = host
                .get::<Proxied>()
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((plugin.to_string(), event.clone(), index));
            if !fresh {
                return Ok(Value::Null);
            }
            on_bus(host, |py, bus| {
                let proxy = proxy(py, event.clone(), index, deliver)?;
                bus.call_method1("subscribe", (plugin, &event, proxy))?;
                Ok(Value::Null)
            })
        }
        HostCall::CallMcp {
            server,
            tool,
            arguments,
            timeout,
        } => on_bus(host, |py, _| {
            let arguments = pythonize::pythonize(py, &arguments)?;
            let timeout = pythonize::pythonize(py, &timeout)?;
            let called = super::mcp::call_mcp(
                py,
                host,
                plugin,
                &server,
                &tool,
                Some(&arguments),
                Some(&timeout),
            );
            Ok(match called {
                Ok(envelope) => json!({"ok": crate::runtime::value::to_json(envelope.bind(py))?}),
                Err(e) => json!({"raised": {
                    "type": e.get_type(py).name()?.to_string(),
                    "message": e.value(py).to_string(),
                }}),
            })
        }),
        HostCall::PlatformAction {
            verb,
            platform,
            args,
        } => Ok(super::platform::actions::act_blocking(
            host.peek::<crate::dialects::platforms::PlatformTable>(),
            verb,
            platform,
            args,
        )),
        HostCall::HasPlugin { id } => {
            if id == plugin {
                return Ok(Value::Bool(false));
            }
            on_bus(host, |_, bus| {
                bus.call_method1("has_plugin", (id,))?
                    .extract::<bool>()
                    .map(Value::Bool)
            })
        }
        HostCall::McpServers => Ok(super::python_fns::host_mcp_servers(host)),
        HostCall::Loaded { name } => on_bus(host, |_, bus| {
            bus.call_method1("loaded", (plugin, name))?;
            Ok(Value::Null)
        }),
        // Any dialect's, served by `host_calls::serve` before it comes here.
        HostCall::PlatformSignal { .. } => Err("a platform signal is the gateway's".into()),
        HostCall::ChainNext { .. } => Err("a middleware's next_call is its chain's".into()),
    }
}

/// In plughost: isolated plugin `plugin` is gone: its subscriptions and
/// its place in `has_plugin` go with it, as an in-process plugin's teardown
/// removes them.
pub fn forget(host: &Arc<Extensions>, plugin: &str) {
    if let Some(p) = host.peek::<Proxied>() {
        p.0.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(owner, _, _)| owner != plugin);
    }
    let _ = on_bus(host, |_, bus| {
        bus.call_method1("remove_owner", (plugin,))?;
        bus.call_method1("unloaded", (plugin,))?;
        Ok(Value::Null)
    });
}

/// How long the host waits for the events queued to an isolated plugin
/// before unloading it: each is a round trip to a worker (in-process, the
/// bus's own 2 s).
const DRAIN_LIMIT_SECONDS: f64 = 10.0;

/// In plughost: wait (bounded, by the bus) until the events queued so far
/// are delivered.
pub fn drain(host: &Arc<Extensions>) {
    if host.peek::<super::Bus>().is_none() {
        return;
    }
    let _ = on_bus(host, |_, bus| {
        bus.call_method1("drain", (DRAIN_LIMIT_SECONDS,))?;
        Ok(Value::Null)
    });
}

/// In the worker: its `RemoteBus` (one plugin per worker process).
static WORKER_BUS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// In the worker: run the plugin's subscriber number `index` of `event`.
pub fn deliver_here(event: &str, index: usize, payload: Value) {
    let done = crate::runtime::try_attach(|py| -> PyResult<()> {
        let Some(bus) = WORKER_BUS.get(py) else {
            return Ok(());
        };
        let payload = pythonize::pythonize(py, &payload)?;
        bus.bind(py)
            .call_method1("deliver", (event, index, payload))?;
        Ok(())
    });
    if let Ok(Err(e)) = done {
        tracing::warn!("event '{event}' could not be delivered in this worker: {e}");
    }
}

/// Run `f` with the host's bus (the GIL held). A host whose plugins all
/// run in workers may not have started its interpreter: it starts now
/// (plughost's own modules only; no plugin code is imported here).
fn on_bus(
    host: &Extensions,
    f: impl FnOnce(Python<'_>, &Bound<'_, PyAny>) -> PyResult<Value>,
) -> Result<Value, String> {
    host.peek::<crate::runtime::Runtime>()
        .map(|rt| (*rt).clone())
        .unwrap_or_else(crate::runtime::Runtime::current)
        .interpreter()
        .map_err(|e| format!("the host's interpreter cannot start: {e}"))?;
    crate::runtime::try_attach(|py| {
        super::bus(py, host)
            .and_then(|bus| f(py, &bus))
            .map_err(|e| e.to_string())
    })
    .map_err(|e| e.to_string())?
}

/// The subscriber the host's bus calls for a worker's subscribers of
/// `event`: it hands the payload to the worker and returns when they ran
/// (the GIL released meanwhile).
fn proxy(
    py: Python<'_>,
    event: String,
    index: usize,
    deliver: Arc<dyn Deliver>,
) -> PyResult<Bound<'_, PyAny>> {
    let f = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            let payload = match kwargs {
                Some(k) => crate::runtime::value::to_json(k.as_any())?,
                None => Value::Object(Default::default()),
            };
            let deliver = deliver.clone();
            let event = event.clone();
            args.py()
                .detach(move || deliver.deliver(&event, index, &payload));
            Ok(())
        },
    )?;
    Ok(f.into_any())
}

/// In the worker: the `RemoteBus` the plugin's runtime uses, its calls
/// going over `calls`.
pub(super) fn worker_bus<'py>(
    py: Python<'py>,
    calls: Arc<dyn HostCalls>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args: &Bound<'_, PyTuple>,
              _kwargs: Option<&Bound<'_, PyDict>>|
              -> PyResult<Py<PyAny>> {
            let py = args.py();
            let request = crate::runtime::value::to_json(&args.get_item(0)?)?;
            let call: HostCall = serde_json::from_value(request).map_err(|e| {
                pyo3::exceptions::PyValueError::new_err(format!("not a host call: {e}"))
            })?;
            let calls = calls.clone();
            let answer = py
                .detach(move || calls.call(call))
                .map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
            Ok(pythonize::pythonize(py, &answer)?.unbind())
        },
    )?;
    let bus = py
        .import("_plughost_hermes_ctx")?
        .getattr("RemoteBus")?
        .call1((call,))?;
    let _ = WORKER_BUS.set(py, bus.clone().unbind());
    Ok(bus)
}

/// In the worker: `ctx.call_mcp` asked of the host; its envelope, or the
/// exception the host's member raised (the builtin of that name).
pub(super) fn call_mcp_from_worker(
    py: Python<'_>,
    bridge: Arc<dyn HostCalls>,
    server: &str,
    tool: &str,
    arguments: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let value = |v: Option<&Bound<'_, PyAny>>| -> PyResult<Value> {
        match v.filter(|v| !v.is_none()) {
            None => Ok(Value::Null),
            Some(v) => crate::runtime::value::to_json(v),
        }
    };
    let call = HostCall::CallMcp {
        server: server.to_string(),
        tool: tool.to_string(),
        arguments: value(arguments)?,
        timeout: value(timeout)?,
    };
    let answer = py
        .detach(move || bridge.call(call))
        .map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
    if let Some(raised) = answer.get("raised") {
        let kind = raised["type"].as_str().unwrap_or("RuntimeError");
        let message = raised["message"].as_str().unwrap_or_default();
        let class = py
            .import("builtins")?
            .getattr(kind)
            .unwrap_or_else(|_| py.get_type::<pyo3::exceptions::PyRuntimeError>().into_any());
        return Err(PyErr::from_value(class.call1((message,))?));
    }
    Ok(pythonize::pythonize(py, &answer["ok"])?.unbind())
}

/// A new bus for `host` (made once per host): the host's `HostBus`, or in
/// a worker the `RemoteBus` over the bridge. A host whose Hermes plugins
/// all run in workers still has one: the module is plughost's own, never
/// a plugin's code.
pub(super) fn new_bus(py: Python<'_>, host: &Extensions) -> PyResult<Py<PyAny>> {
    let sys_modules = py.import("sys")?.getattr("modules")?;
    if !sys_modules.contains("_plughost_hermes_ctx")? {
        super::module_from_source(py, "_plughost_hermes_ctx", super::CTX_SOURCE, false)?;
    }
    Ok(match crate::dialects::host_calls::bridge(host) {
        Some(calls) => worker_bus(py, calls)?.unbind(),
        None => py
            .import("_plughost_hermes_ctx")?
            .getattr("HostBus")?
            .call1((gateway_actions(py, host)?,))?
            .unbind(),
    })
}

/// The in-process bus's way to the host gateway's `platform_actions`:
/// `act(verb, platform, args_json) -> result_json`, blocking (the facade
/// calls it from a thread). It holds the host's platform table, not the
/// host (the bus lives in the host: no cycle).
fn gateway_actions<'py>(py: Python<'py>, host: &Extensions) -> PyResult<Bound<'py, PyAny>> {
    let table = host.get::<crate::dialects::platforms::PlatformTable>();
    let act = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<String> {
            let (verb, platform, json): (String, String, String) = args.extract()?;
            let parsed: Value = serde_json::from_str(&json)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            let table = table.clone();
            let result = args.py().detach(move || {
                super::platform::actions::act_blocking(Some(table), verb, platform, parsed)
            });
            Ok(result.to_string())
        },
    )?;
    Ok(act.into_any())
}
