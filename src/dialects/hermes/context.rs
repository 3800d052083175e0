//! Hermes's `PluginContext`: the surface a Hermes plugin's `register(ctx)`
//! touches (`hermes_cli/plugins.py`), collecting plughost registrations.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{
    PyAttributeError, PyFileNotFoundError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use serde_json::Value;

use super::handlers::HermesTool;
use super::hooks::HermesHook;
use super::render::HermesRenderer;
use crate::core::extensions::Extensions;
use crate::core::hooks::{HookEntry, HookEvent, HookStats};
use crate::core::registry::{
    normalize_command_name, Command, Registration, Skill, Tool, ToolSpec, RESERVED_COMMANDS,
};
use crate::dialects::flowly::handlers::PyCommand;
use crate::dialects::flowly::normalize_schema;
use crate::dialects::shared::{skill_name_problem, SkillNameProblem};

/// Whether `name` is a Hermes hook plughost accepts and never fires
/// ([`super::valid_hooks`] says why).
pub fn never_fires(name: &str) -> bool {
    super::valid_hooks::never_fires(name).is_some()
}

/// Registrars Hermes offers that plughost accepts and does not use:
/// provider and host-specific registrations.
pub const UNUSED_REGISTRARS: &[&str] = &[
    "register_video_gen_provider",
    "register_dashboard_auth_provider",
    "register_slack_action_handler",
    "register_auxiliary_task",
    "register_platform_handler",
    "register_telegram_handler",
    "register_system_prompt_section",
    "register_redaction_patterns",
    "register_approval_transport",
    "register_secret_source",
];

struct State {
    open: bool,
    pending: Vec<Registration>,
    /// `register_cli_command` commands, committed when loading succeeds.
    cli: Vec<(String, super::cli::CliCommand)>,
    /// Web search/extract providers, handed to the registry on success.
    web_providers: Vec<Py<PyAny>>,
    /// What the plugin registered that this host does not use.
    unused: Vec<String>,
}

/// `hermes_cli.plugins.PluginContext` for plughost.
#[pyclass(module = "hermes_cli.plugins", name = "PluginContext", frozen)]
pub struct HermesContext {
    key: String,
    dir: PathBuf,
    manifest: Py<PyAny>,
    state: Arc<Mutex<State>>,
    /// The state of the host loading the plugin (its agent, its sessions' inboxes).
    pub(super) host: Arc<Extensions>,
    /// Its `_plughost_hermes_ctx.PluginRuntime`: the members kept in Python.
    runtime: Py<PyAny>,
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

fn require_callable(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    if obj.is_callable() {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!(
            "{what} must be callable, got {}",
            type_name(obj)
        )))
    }
}

fn callable_label(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("__qualname__")
        .or_else(|_| obj.getattr("__name__"))
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| type_name(obj))
}

impl HermesContext {
    pub fn new(
        key: &str,
        dir: &Path,
        manifest: Py<PyAny>,
        host: Arc<Extensions>,
        runtime: Py<PyAny>,
    ) -> HermesContext {
        HermesContext {
            host,
            runtime,
            key: key.to_string(),
            dir: dir.to_path_buf(),
            manifest,
            state: Arc::new(Mutex::new(State {
                open: true,
                pending: Vec::new(),
                cli: Vec::new(),
                web_providers: Vec::new(),
                unused: Vec::new(),
            })),
        }
    }

    /// Its `_plughost_hermes_ctx.PluginRuntime`.
    pub fn runtime<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.runtime.bind(py)
    }

    /// The web providers it registered (taken; call after [`Self::finish`]).
    pub fn take_web_providers(&self) -> Vec<Py<PyAny>> {
        std::mem::take(&mut self.state.lock().expect("context lock").web_providers)
    }

    /// The CLI commands it registered (taken; call after [`Self::finish`]).
    pub fn take_cli_commands(&self) -> Vec<(String, super::cli::CliCommand)> {
        std::mem::take(&mut self.state.lock().expect("context lock").cli)
    }

    /// Close registration; take what was registered and what goes unused.
    pub fn finish(&self) -> (Vec<Registration>, Vec<String>) {
        let mut state = self.state.lock().expect("context lock");
        state.open = false;
        (
            std::mem::take(&mut state.pending),
            std::mem::take(&mut state.unused),
        )
    }

    /// A provider that backs a tool ([`super::providers::register`]); what is
    /// not one is recorded as registered, not used.
    fn tool_provider(
        &self,
        py: Python<'_>,
        spec: &super::providers::ToolProvider,
        registrar: &str,
        provider: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let home = self
            .runtime
            .bind(py)
            .getattr("_plughost_home")?
            .str()?
            .to_string();
        let at = (self.key.as_str(), &self.host, Path::new(&home));
        match super::providers::register(py, spec, at, provider)? {
            Some(registrations) => registrations.into_iter().try_for_each(|r| self.push(r)),
            None => {
                let mut state = self.state.lock().expect("context lock");
                state.unused.push(registrar.into());
                Ok(())
            }
        }
    }

    /// The host's home, as the runtime knows it.
    fn home(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self
            .runtime
            .bind(py)
            .getattr("_plughost_home")?
            .str()?
            .to_string())
    }

    /// Record `registrar` as registered, not used by this host.
    fn unused(&self, registrar: &str) -> PyResult<()> {
        let mut state = self.state.lock().expect("context lock");
        state.unused.push(registrar.into());
        Ok(())
    }

    fn push(&self, registration: Registration) -> PyResult<()> {
        let mut state = self.state.lock().expect("context lock");
        if !state.open {
            return Err(PyRuntimeError::new_err(format!(
                "plugin '{}' registered something after register(ctx) returned; register everything inside register(ctx)",
                self.key
            )));
        }
        state.pending.push(registration);
        Ok(())
    }
}

#[pymethods]
impl HermesContext {
    /// The plugin's manifest (`.name`, `.version`, `.key`, `.source`, `.path`, …).
    #[getter]
    fn manifest(&self, py: Python<'_>) -> Py<PyAny> {
        self.manifest.clone_ref(py)
    }

    #[getter]
    fn plugin_id(&self) -> &str {
        &self.key
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (name, toolset, schema, handler, check_fn=None, requires_env=None, is_async=false, description="", emoji="", r#override=false))]
    fn register_tool(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        toolset: &Bound<'_, PyAny>,
        schema: &Bound<'_, PyAny>,
        handler: &Bound<'_, PyAny>,
        check_fn: Option<&Bound<'_, PyAny>>,
        requires_env: Option<&Bound<'_, PyAny>>,
        is_async: bool,
        description: &str,
        emoji: &str,
        r#override: bool,
    ) -> PyResult<()> {
        let _ = (is_async, emoji); // awaitables are awaited whatever is_async says
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_tool: name must be a string"))?;
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(PyValueError::new_err(
                "register_tool: name must not be empty",
            ));
        }
        let toolset: String = toolset.extract().map_err(|_| {
            PyTypeError::new_err(format!("register_tool('{name}'): toolset must be a string"))
        })?;
        require_callable(handler, "register_tool: handler")?;
        let check_fn = check_fn.filter(|c| !c.is_none());
        if let Some(c) = check_fn {
            require_callable(c, "register_tool: check_fn")?;
        }
        let requires_env: Vec<String> = match requires_env.filter(|r| !r.is_none()) {
            None => Vec::new(),
            Some(r) => r.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "register_tool('{name}'): requires_env must be a list of variable names"
                ))
            })?,
        };
        let schema_value: Value = if schema.is_none() {
            Value::Null
        } else {
            crate::runtime::value::to_json(schema).map_err(|e| {
                PyValueError::new_err(format!(
                    "register_tool('{name}'): schema is not JSON-like: {e}"
                ))
            })?
        };
        let (parameters, schema_description) = normalize_schema(&schema_value);
        let description = if description.is_empty() {
            schema_description
        } else {
            description.to_string()
        };
        let handler = HermesTool::new(
            py,
            handler.clone().unbind(),
            check_fn.map(|c| c.clone().unbind()),
            requires_env,
            Arc::clone(&self.host),
        )?;
        let mut tool = Tool::new(
            ToolSpec {
                name,
                description,
                parameters,
                plugin: self.key.clone(),
                toolset,
                ..Default::default()
            },
            Arc::new(handler),
        );
        tool.renderer = Some(Arc::new(HermesRenderer));
        tool.shadows_only_own_toolset = !r#override;
        self.push(Registration::Tool(tool))
    }

    fn register_hook(
        &self,
        py: Python<'_>,
        hook_name: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let name: String = hook_name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_hook: hook name must be a string"))?;
        require_callable(callback, "register_hook: callback")?;
        let row = super::lanes::by_name(&name);
        let event = row.map(|r| r.lane);
        if event.is_none() {
            if never_fires(&name) {
                tracing::info!(
                    "Hermes plugin '{}' registers hook '{name}', which plughost never fires",
                    self.key
                );
            } else {
                // The seed's names (Hermes's own lanes are not listed).
                let valid: Vec<&str> = super::lanes::EVENTS
                    .iter()
                    .filter(|r| !matches!(r.lane, HookEvent::Lane(_)))
                    .map(|r| r.name)
                    .collect();
                tracing::warn!(
                    "Hermes plugin '{}' registers unknown hook '{name}'; it will never fire (plughost fires: {})",
                    self.key,
                    valid.join(", ")
                );
            }
        }
        let label = callable_label(callback);
        let entry = HookEntry {
            owner: self.key.clone(),
            label: label.clone(),
            priority: 0,
            callback: Arc::new(HermesHook::new(py, callback.clone().unbind(), row)?),
            stats: Arc::new(HookStats::default()),
        };
        self.push(Registration::Hook { event, name, entry })
    }

    #[pyo3(signature = (name, handler, description="", args_hint="", argument_mode=None))]
    fn register_command(
        &self,
        name: &Bound<'_, PyAny>,
        handler: &Bound<'_, PyAny>,
        description: &str,
        args_hint: &str,
        argument_mode: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = argument_mode; // plughost always passes the raw argument text
        let raw: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_command: name must be a string"))?;
        require_callable(handler, "register_command: handler")?;
        let name = normalize_command_name(&raw);
        if name.is_empty() {
            return Err(PyValueError::new_err(
                "register_command: name must not be empty",
            ));
        }
        if RESERVED_COMMANDS.contains(&name.as_str()) {
            tracing::warn!(
                "Hermes plugin '{}' tried to register the built-in command '/{name}'; skipped (reserved: /new, /clear, /compact, /help)",
                self.key
            );
            return Ok(());
        }
        self.push(Registration::Command(Command {
            name,
            description: description.to_string(),
            args_hint: args_hint.to_string(),
            plugin: self.key.clone(),
            handler: Arc::new(PyCommand {
                handler: handler.clone().unbind(),
            }),
        }))
    }

    #[pyo3(signature = (name, path, description="", frontmatter=None))]
    fn register_skill(
        &self,
        name: &Bound<'_, PyAny>,
        path: &Bound<'_, PyAny>,
        description: &str,
        frontmatter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = frontmatter;
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_skill: name must be a string"))?;
        match skill_name_problem(&name) {
            Some(SkillNameProblem::Colon) => return Err(PyValueError::new_err(format!(
                "Skill name '{name}' must not contain ':' (the namespace is derived from the plugin name '{}' automatically).",
                self.key
            ))),
            Some(SkillNameProblem::Invalid) => return Err(PyValueError::new_err(format!(
                "Invalid skill name '{name}'. Must match [a-zA-Z0-9_-]+."
            ))),
            None => {}
        }
        let resolved = crate::dialects::shared::skill_path(path, &self.dir)?;
        if !resolved.is_file() {
            return Err(PyFileNotFoundError::new_err(format!(
                "SKILL.md not found at {}",
                resolved.display()
            )));
        }
        self.push(Registration::Skill(Skill {
            name: format!("{}:{name}", self.key),
            plugin: self.key.clone(),
            description: description.to_string(),
            path: resolved,
        }))
    }

    /// The host-owned LLM facade (`agent.plugin_llm.PluginLlm` in Hermes),
    /// backed by the model of the agent running this host.
    #[getter]
    fn llm(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let class = py.import("_plughost_hermes")?.getattr("PluginLlm")?;
        let kw = PyDict::new(py);
        kw.set_item("plugin_id", &slf.get().key)?;
        let llm = class.call((), Some(&kw))?;
        // Its calls go to this context's host (see `llm_complete`).
        llm.setattr("_plughost_ctx", slf)?;
        Ok(llm.unbind())
    }

    /// Call any registered tool through the host's pipeline (its
    /// `pre_tool_call` guards included); its JSON string back.
    #[pyo3(signature = (tool_name, args=None, **kwargs))]
    fn dispatch_tool(
        &self,
        py: Python<'_>,
        tool_name: &str,
        args: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        let args = match args.filter(|a| !a.is_none()) {
            None => Value::Object(Default::default()),
            Some(a) => crate::runtime::value::to_json(a).map_err(|e| {
                PyValueError::new_err(format!(
                    "dispatch_tool('{tool_name}'): args are not JSON-like: {e}"
                ))
            })?,
        };
        let task_id: String = match kwargs.and_then(|k| k.get_item("task_id").ok().flatten()) {
            Some(t) if !t.is_none() => t.str()?.to_string(),
            _ => String::new(),
        };
        Ok(py.detach(|| super::link::dispatch_tool(&self.host, tool_name, args, &task_id)))
    }

    /// Queue a message into the conversation (see [`super::link`]);
    /// `False` when no agent runs, as Hermes without its CLI.
    #[pyo3(signature = (content, role="user", **_kwargs))]
    fn inject_message(
        &self,
        py: Python<'_>,
        content: &str,
        role: &str,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> bool {
        let key: Option<String> = _kwargs
            .and_then(|k| k.get_item("session_key").ok().flatten())
            .and_then(|v| v.extract().ok());
        super::link::inject_to(py, &self.host, content, role, key.as_deref())
    }

    /// A web search/extract backend (`agent.web_search_provider.WebSearchProvider`,
    /// Hermes's or compat); it serves plughost's `web_search`/`web_extract`
    /// tools once the plugin has loaded. As in Hermes, anything else is
    /// warned about and ignored.
    fn register_web_search_provider(&self, provider: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = provider.py();
        let base = py
            .import("agent.web_search_provider")
            .and_then(|m| m.getattr("WebSearchProvider"))?;
        let name = provider
            .getattr("name")
            .ok()
            .and_then(|n| n.extract::<String>().ok())
            .filter(|n| !n.trim().is_empty());
        if !provider.is_instance(&base)? || name.is_none() {
            tracing::warn!(
                "Plugin '{}' tried to register a web provider that does not inherit from WebSearchProvider (or has no name). Ignoring.",
                self.key
            );
            return Ok(());
        }
        let mut state = self.state.lock().expect("context lock");
        if !state.open {
            return Err(PyRuntimeError::new_err(format!(
                "plugin '{}' registered something after register(ctx) returned; register everything inside register(ctx)",
                self.key
            )));
        }
        state.web_providers.push(provider.clone().unbind());
        Ok(())
    }

    /// A terminal subcommand, run as `plughost hermes <name> …` (see
    /// [`super::cli`]).
    #[pyo3(signature = (name, help, setup_fn, handler_fn=None, description=""))]
    fn register_cli_command(
        &self,
        name: &Bound<'_, PyAny>,
        help: &Bound<'_, PyAny>,
        setup_fn: &Bound<'_, PyAny>,
        handler_fn: Option<&Bound<'_, PyAny>>,
        description: &str,
    ) -> PyResult<()> {
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("register_cli_command: name must be a string"))?;
        let name = name.trim().to_string();
        if name.is_empty() || name.starts_with('-') || name.contains(char::is_whitespace) {
            return Err(PyValueError::new_err(format!(
                "register_cli_command: '{name}' is not a command name (one word, not starting with '-')"
            )));
        }
        let help = if help.is_none() {
            String::new()
        } else {
            help.str()?.to_string()
        };
        require_callable(setup_fn, "register_cli_command: setup_fn")?;
        let handler_fn = handler_fn.filter(|h| !h.is_none());
        if let Some(h) = handler_fn {
            require_callable(h, "register_cli_command: handler_fn")?;
        }
        let mut state = self.state.lock().expect("context lock");
        if !state.open {
            return Err(PyRuntimeError::new_err(format!(
                "plugin '{}' registered something after register(ctx) returned; register everything inside register(ctx)",
                self.key
            )));
        }
        state.cli.push((
            name,
            super::cli::CliCommand {
                plugin: self.key.clone(),
                help,
                description: description.to_string(),
                setup_fn: setup_fn.clone().unbind(),
                handler_fn: handler_fn.map(|h| h.clone().unbind()),
            },
        ));
        Ok(())
    }

    /// `ctx.call_mcp`: a tool of one of the host's MCP servers, with
    /// Hermes's per-server allowlist and envelope (see [`super::mcp`]).
    #[pyo3(signature = (server, tool, arguments=None, timeout=None))]
    fn call_mcp(
        &self,
        py: Python<'_>,
        server: &str,
        tool: &str,
        arguments: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        super::mcp::call_mcp(py, &self.host, &self.key, server, tool, arguments, timeout)
    }

    /// The host's memory provider (see [`super::memory`]): its lanes and
    /// tools are committed with the plugin's other registrations.
    fn register_memory_provider(
        &self,
        py: Python<'_>,
        provider: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let home = self
            .runtime
            .bind(py)
            .getattr("_plughost_home")?
            .str()?
            .to_string();
        match super::memory::register(py, &self.key, &self.host, Path::new(&home), provider)? {
            Some(registrations) => registrations.into_iter().try_for_each(|r| self.push(r)),
            None => {
                let mut state = self.state.lock().expect("context lock");
                state.unused.push("register_memory_provider".into());
                Ok(())
            }
        }
    }

    /// An image generation backend for the `image_generate` tool (see [`super::providers`]).
    fn register_image_gen_provider(
        &self,
        py: Python<'_>,
        provider: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.tool_provider(
            py,
            &super::providers::IMAGE_GEN,
            "register_image_gen_provider",
            provider,
        )
    }

    /// A text-to-speech backend for the `text_to_speech` tool (see [`super::providers`]).
    fn register_tts_provider(&self, py: Python<'_>, provider: &Bound<'_, PyAny>) -> PyResult<()> {
        self.tool_provider(
            py,
            &super::providers::TTS,
            "register_tts_provider",
            provider,
        )
    }

    /// A speech-to-text backend for the `transcribe_audio` tool (see [`super::providers`]).
    fn register_transcription_provider(
        &self,
        py: Python<'_>,
        provider: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.tool_provider(
            py,
            &super::providers::STT,
            "register_transcription_provider",
            provider,
        )
    }

    /// The host's context engine when `context.engine` names it (see
    /// [`super::context_engine`]): its lanes and tools are committed with
    /// the plugin's other registrations.
    fn register_context_engine(&self, py: Python<'_>, engine: &Bound<'_, PyAny>) -> PyResult<()> {
        let home = self.home(py)?;
        match super::context_engine::register(py, &self.key, &self.host, Path::new(&home), engine)?
        {
            Some(registrations) => registrations.into_iter().try_for_each(|r| self.push(r)),
            None => self.unused("register_context_engine"),
        }
    }

    /// A cloud browser backend for the `browser_*` tools (see [`super::browser`]).
    fn register_browser_provider(
        &self,
        py: Python<'_>,
        provider: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let home = self.home(py)?;
        match super::browser::register(py, &self.key, &self.host, Path::new(&home), provider)? {
            Some(registrations) => registrations.into_iter().try_for_each(|r| self.push(r)),
            None => self.unused("register_browser_provider"),
        }
    }

    /// Middleware around tool calls and model calls (see [`super::middleware`]).
    fn register_middleware(&self, kind: &str, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        require_callable(callback, "register_middleware: callback")?;
        match super::middleware::register(&self.key, kind, callback) {
            Some(registration) => self.push(registration),
            None => Ok(()),
        }
    }

    /// Hermes's provider and host-specific registrars: accepted, recorded,
    /// not used. The parts of Hermes's context plughost lacks raise an
    /// `AttributeError` saying so.
    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        // The current context's teardown, events, state, settings and
        // capability probes (`_plughost_hermes_ctx`).
        let members = py.import("_plughost_hermes_ctx")?.getattr("MEMBERS")?;
        if members.contains(name)? {
            return Ok(self.runtime.bind(py).getattr(name)?.unbind());
        }
        if UNUSED_REGISTRARS.contains(&name) {
            let state = Arc::clone(&self.state);
            let key = self.key.clone();
            let what = name.to_string();
            let recorder = PyCFunction::new_closure(
                py,
                None,
                None,
                move |_args: &Bound<'_, PyTuple>,
                      _kwargs: Option<&Bound<'_, PyDict>>|
                      -> PyResult<()> {
                    tracing::warn!(
                        "Hermes plugin '{key}' called {what}: registered, not used by this host"
                    );
                    let mut state = state.lock().expect("context lock");
                    if !state.unused.contains(&what) {
                        state.unused.push(what.clone());
                    }
                    Ok(())
                },
            )?;
            return Ok(recorder.into_any().unbind());
        }
        Err(PyAttributeError::new_err(format!(
            "'PluginContext' object has no attribute '{name}'"
        )))
    }

    fn __repr__(&self) -> String {
        format!("<PluginContext plugin={:?} dialect=hermes>", self.key)
    }
}
