//! Hermes's messaging platforms (`ctx.register_platform`) as plughost's
//! gateway runs them: each registration a [`PlatformFactory`] whose
//! adapters are made by the plugin's `adapter_factory` from a
//! `PlatformConfig` read from Hermes's `config.yaml`
//! (`platforms.<name>`, or `gateway.platforms.<name>`), enabled there
//! (`enabled: true`) or by the entry's `env_enablement_fn`, as in Hermes.
//! The adapter (a `gateway.platforms.base.BasePlatformAdapter`) speaks to
//! the gateway through `HermesPort`: its `handle_message` pushes the
//! event into the gateway's inlet, the gateway calls its `connect`,
//! `disconnect`, `send` (`_send_with_retry`) and `edit_message`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;

use crate::core::extensions::Extensions;
use crate::core::hooks::BoxFuture;
use crate::dialects::platforms::{
    ChatAddress, ChatSettings, InboundChat, Inlet, PlatformFactory, PlatformPort, PlatformTable,
    PortError, PortSignal, Readiness,
};
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{attach, try_attach};

pub mod actions;
pub mod event;

/// A plugin loaded: the platforms its context's runtime recorded
/// (`ctx.register_platform`, Hermes's signature, kept in Python by
/// `_plughost_hermes_ctx.PluginRuntime`) become the host's, replacing what
/// its earlier load registered. A load that fails commits nothing.
pub fn commit(host: &Extensions, key: &str, runtime: &Bound<'_, PyAny>) -> PyResult<()> {
    let entries = runtime.getattr("_platforms")?;
    let mut platforms: Vec<Arc<dyn PlatformFactory>> = Vec::new();
    for entry in entries.try_iter()? {
        let entry = entry?;
        platforms.push(Arc::new(HermesPlatform {
            name: entry.getattr("name")?.extract()?,
            label: entry.getattr("label")?.extract()?,
            plugin: key.to_string(),
            entry: entry.unbind(),
            home: super::discover::hermes_home(),
        }));
    }
    if !platforms.is_empty() || host.peek::<PlatformTable>().is_some() {
        host.get::<PlatformTable>().set_plugin(key, platforms);
    }
    Ok(())
}

/// `plugins doctor`'s lines for the platforms plugin `key` registered:
/// whether `plughost serve` starts each, and why not.
pub fn doctor_lines(host: &Extensions, key: &str) -> Vec<String> {
    let Some(table) = host.peek::<PlatformTable>() else {
        return Vec::new();
    };
    table
        .of_plugin(key)
        .iter()
        .map(|p| {
            let state = match p.readiness() {
                Readiness::Enabled => {
                    "enabled: plughost serve connects it (an isolated plugin's adapter runs in its worker)".to_string()
                }
                Readiness::Disabled(why) => format!("disabled: {why}"),
                Readiness::Unavailable(why) => format!("unavailable: {why}"),
            };
            format!("platform {} ({}): {state}", p.name(), p.label())
        })
        .collect()
}

/// One `register_platform` entry.
struct HermesPlatform {
    name: String,
    label: String,
    plugin: String,
    /// The `PlatformEntry`.
    entry: Py<PyAny>,
    home: std::path::PathBuf,
}

/// Hermes's `config.yaml` as JSON (`Null` when absent or unreadable).
fn config_yaml(home: &Path) -> Value {
    let path = home.join("config.yaml");
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => serde_saphyr::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!(
                "cannot parse {} ({e}); no platform is configured",
                path.display()
            );
            Value::Null
        }),
        _ => Value::Null,
    }
}

fn seconds(v: &Value, default: Duration) -> Duration {
    v.as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(default)
}

impl HermesPlatform {
    /// `platforms.<name>` (or `gateway.platforms.<name>`) of `config.yaml`.
    fn config(&self) -> Value {
        let doc = config_yaml(&self.home);
        let top = &doc["platforms"][&self.name];
        if top.is_object() {
            return top.clone();
        }
        doc["gateway"]["platforms"][&self.name].clone()
    }

    /// The `PlatformConfig` an adapter is made from, `env_enablement_fn`'s
    /// fields seeded into `extra` when the configuration does not enable it.
    fn platform_config<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, bool)> {
        let config = self.config();
        let pc = py
            .import("gateway.config")?
            .getattr("PlatformConfig")?
            .call_method1("from_dict", (pythonize::pythonize(py, &config)?,))?;
        let mut enabled = config["enabled"].as_bool().unwrap_or(false);
        let explicitly_off = config["enabled"] == Value::Bool(false);
        let env_fn = self.entry.bind(py).getattr("env_enablement_fn")?;
        if !enabled && !explicitly_off && !env_fn.is_none() {
            let seeded = env_fn.call0()?;
            if let Ok(extra) = seeded.cast::<PyDict>() {
                let target = pc.getattr("extra")?;
                for (k, v) in extra.iter() {
                    if k.extract::<String>().is_ok_and(|k| k == "home_channel") {
                        continue;
                    }
                    target.set_item(k, v)?;
                }
                pc.setattr("enabled", true)?;
                enabled = true;
            }
        }
        Ok((pc, enabled))
    }

    fn check(&self, py: Python<'_>, pc: &Bound<'_, PyAny>) -> Result<(), String> {
        let entry = self.entry.bind(py);
        let hint = entry
            .getattr("install_hint")
            .and_then(|h| h.extract::<String>())
            .unwrap_or_default();
        let check = entry.getattr("check_fn").map_err(|e| e.to_string())?;
        let ok = !check.is_none() && check.call0().and_then(|r| r.is_truthy()).unwrap_or(false);
        if !ok {
            let why = if hint.is_empty() {
                "its check_fn answered False (dependencies or environment missing)".to_string()
            } else {
                format!("its check_fn answered False: {hint}")
            };
            return Err(why);
        }
        let validate = entry
            .getattr("validate_config")
            .map_err(|e| e.to_string())?;
        if !validate.is_none()
            && !validate
                .call1((pc,))
                .and_then(|r| r.is_truthy())
                .unwrap_or(false)
        {
            return Err(format!(
                "validate_config rejected platforms.{} of Hermes's config.yaml",
                self.name
            ));
        }
        Ok(())
    }
}

impl PlatformFactory for HermesPlatform {
    fn name(&self) -> &str {
        &self.name
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn plugin(&self) -> &str {
        &self.plugin
    }

    fn readiness(&self) -> Readiness {
        try_attach(|py| {
            let (pc, enabled) = match self.platform_config(py) {
                Ok(v) => v,
                Err(e) => return Readiness::Unavailable(format!("its configuration: {e}")),
            };
            if !enabled {
                return Readiness::Disabled(format!(
                    "not enabled (set platforms.{}.enabled: true in Hermes's config.yaml)",
                    self.name
                ));
            }
            match self.check(py, &pc) {
                Ok(()) => Readiness::Enabled,
                Err(why) => Readiness::Unavailable(why),
            }
        })
        .unwrap_or_else(|e| Readiness::Unavailable(e.to_string()))
    }

    fn settings(&self) -> ChatSettings {
        let config = self.config();
        let doc = config_yaml(&self.home);
        let extra = &config["extra"];
        let base = ChatSettings::default();
        let progress = extra["tool_progress"]
            .as_str()
            .or(doc["display"]["tool_progress"].as_str());
        ChatSettings {
            tool_progress: progress != Some("off"),
            merge_text: extra["merge_text"].as_bool().unwrap_or(false),
            reconnect_delay: seconds(&doc["gateway"]["reconnect_delay"], base.reconnect_delay),
            reconnect_max: seconds(&doc["gateway"]["reconnect_max_delay"], base.reconnect_max),
        }
    }

    fn create(&self, inlet: Inlet) -> Result<Arc<dyn PlatformPort>, String> {
        let made = try_attach(|py| -> PyResult<Py<PyAny>> {
            let (pc, _) = self.platform_config(py)?;
            let adapter = self
                .entry
                .bind(py)
                .getattr("adapter_factory")?
                .call1((pc,))?;
            if adapter.is_none() {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "adapter_factory returned None",
                ));
            }
            let push = Py::new(py, Push(inlet.clone()))?;
            let fatal = Py::new(py, Fatal(inlet.clone()))?;
            let event = Py::new(py, PlatformEvent(inlet))?;
            py.import("gateway.platforms.base")?
                .getattr("_plughost_attach")?
                .call1((&adapter, push, fatal, event))?;
            Ok(adapter.unbind())
        })
        .map_err(|e| e.to_string())?;
        let adapter = made.map_err(|e| attach(|py| describe(py, &e)))?;
        Ok(Arc::new(HermesPort {
            adapter: Arc::new(adapter),
        }))
    }
}

fn describe(py: Python<'_>, e: &PyErr) -> String {
    format!(
        "{}: {}",
        e.get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default(),
        e.value(py)
    )
}

/// The adapter's `handle_message` end: an event's fields into the inlet.
#[pyclass(frozen, module = "_plughost_hermes", name = "GatewayInlet")]
struct Push(Inlet);

#[pymethods]
impl Push {
    fn __call__(&self, wire: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = crate::runtime::value::to_json(wire)?;
        let mut message: InboundChat = serde_json::from_value(value.clone())
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        if message.session_key.is_empty() {
            message.session_key = session_key(&message);
        }
        // The gateway gone (the server stopping): the message is dropped.
        let _ = self.0.send(PortSignal::Message(Box::new(message)));
        Ok(())
    }
}

/// The adapter's platform-event handler's end: `{"platform",
/// "event_type", "payload"}` into the inlet (a dict is required, as
/// Hermes's runner spreads it into the hook's keywords).
#[pyclass(frozen, module = "_plughost_hermes", name = "GatewayPlatformEvent")]
struct PlatformEvent(Inlet);

#[pymethods]
impl PlatformEvent {
    fn __call__(&self, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let serde_json::Value::Object(event) = crate::runtime::value::to_json(event)? else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a platform event is a dict: {\"platform\", \"event_type\", \"payload\"}",
            ));
        };
        // The gateway gone (the server stopping): the event is dropped.
        let _ = self.0.send(PortSignal::PlatformEvent(event));
        Ok(())
    }
}

/// The adapter's fatal-error handler.
#[pyclass(frozen, module = "_plughost_hermes", name = "GatewayFatal")]
struct Fatal(Inlet);

#[pymethods]
impl Fatal {
    fn __call__(&self, code: String, message: String, retryable: bool) {
        let _ = self.0.send(PortSignal::Fatal {
            code,
            message,
            retryable,
        });
    }
}

/// Hermes's session key of a message (`gateway.session.build_session_key`
/// with its defaults: a group chat's sessions per user).
pub fn session_key(m: &InboundChat) -> String {
    let mut key = format!("agent:main:{}:{}:{}", m.platform, m.chat_type, m.chat_id);
    match (&m.thread_id, &m.user_id) {
        (Some(thread), _) => key = format!("{key}:{thread}"),
        (None, Some(user)) if m.chat_type != "dm" => key = format!("{key}:{user}"),
        _ => {}
    }
    key
}

/// A connected Hermes adapter.
struct HermesPort {
    adapter: Arc<Py<PyAny>>,
}

/// Call `adapter.<method>` or a `gateway.platforms.base` helper, and await it.
async fn call(
    adapter: Arc<Py<PyAny>>,
    make: impl for<'py> FnOnce(Python<'py>, &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) -> Result<Py<PyAny>, String> {
    let started = try_attach(|py| -> Result<Awaited, String> {
        let value = make(py, adapter.bind(py)).map_err(|e| describe(py, &e))?;
        Ok(bridge::resolve(py, value))
    })
    .map_err(|e| e.to_string())??;
    let outcome = match started {
        Awaited::Ready(r) => r,
        Awaited::Pending(task) => task.await,
    };
    outcome.map_err(|e| try_attach(|py| describe(py, &e)).unwrap_or_else(|x| x.to_string()))
}

fn helper<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("gateway.platforms.base")?.getattr(name)
}

impl PlatformPort for HermesPort {
    fn connect(&self) -> BoxFuture<Result<(), PortError>> {
        let adapter = self.adapter.clone();
        Box::pin(async move {
            let result = call(adapter.clone(), |_, a| a.call_method0("connect")).await;
            let ok = match result {
                Ok(value) => {
                    try_attach(|py| value.bind(py).is_truthy().unwrap_or(false)).unwrap_or(false)
                }
                Err(e) => {
                    return Err(PortError {
                        message: format!("connect() raised {e}"),
                        retryable: true,
                    })
                }
            };
            if ok {
                return Ok(());
            }
            // connect() answered False: the adapter's fatal error says why.
            let (message, retryable) = try_attach(|py| {
                let a = adapter.bind(py);
                let message = a
                    .getattr("fatal_error_message")
                    .ok()
                    .and_then(|m| m.extract::<Option<String>>().ok().flatten())
                    .unwrap_or_else(|| "connect() returned False".into());
                let retryable = a
                    .getattr("fatal_error_retryable")
                    .and_then(|r| r.is_truthy())
                    .unwrap_or(true);
                (message, retryable)
            })
            .unwrap_or_else(|e| (e.to_string(), false));
            Err(PortError { message, retryable })
        })
    }

    fn disconnect(&self) -> BoxFuture<()> {
        let adapter = self.adapter.clone();
        Box::pin(async move {
            if let Err(e) = call(adapter.clone(), |_, a| a.call_method0("disconnect")).await {
                tracing::warn!("gateway: an adapter's disconnect() failed: {e}");
            }
            let _ = call(adapter, |_, a| a.call_method0("cancel_background_tasks")).await;
        })
    }

    fn send(
        &self,
        to: ChatAddress,
        text: String,
        reply_to: Option<String>,
    ) -> BoxFuture<Result<Option<String>, String>> {
        let adapter = self.adapter.clone();
        Box::pin(async move {
            let out = call(adapter, move |py, a| {
                let metadata = to.thread_id.as_ref().map(|t| {
                    let d = PyDict::new(py);
                    let _ = d.set_item("thread_id", t);
                    d
                });
                helper(py, "_plughost_send")?.call1((a, &to.chat_id, text, reply_to, metadata))
            })
            .await?;
            try_attach(|py| {
                let (ok, id, error): (bool, Option<String>, Option<String>) =
                    out.bind(py).extract().map_err(|e| describe(py, &e))?;
                if ok {
                    Ok(id)
                } else {
                    Err(error.unwrap_or_else(|| "send failed".into()))
                }
            })
            .map_err(|e| e.to_string())?
        })
    }

    fn edit(
        &self,
        to: ChatAddress,
        message_id: String,
        text: String,
    ) -> BoxFuture<Result<(), String>> {
        let adapter = self.adapter.clone();
        Box::pin(async move {
            let out = call(adapter, move |py, a| {
                helper(py, "_plughost_edit")?.call1((a, &to.chat_id, message_id, text))
            })
            .await?;
            try_attach(|py| {
                let (ok, error): (bool, Option<String>) =
                    out.bind(py).extract().map_err(|e| describe(py, &e))?;
                if ok {
                    Ok(())
                } else {
                    Err(error.unwrap_or_else(|| "edit failed".into()))
                }
            })
            .map_err(|e| e.to_string())?
        })
    }
    /// Hermes's verbs run by the compat `hermes_cli.platform_actions.on_adapter`.
    fn act(&self, platform: String, verb: String, args: Value) -> BoxFuture<Value> {
        let adapter = self.adapter.clone();
        Box::pin(async move {
            let out = call(adapter, move |py, a| {
                let args = pythonize::pythonize(py, &args)?;
                py.import("hermes_cli.platform_actions")?
                    .getattr("on_adapter")?
                    .call1((a, &platform, &verb, args))
            })
            .await;
            let failed = |detail: String| serde_json::json!({"ok": false, "error": "action_failed", "detail": detail});
            match out {
                Ok(result) => try_attach(|py| crate::runtime::value::to_json(result.bind(py)))
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .unwrap_or_else(failed),
                Err(e) => failed(e.chars().take(512).collect()),
            }
        })
    }
}
