//! What plugins contribute: tools, slash commands, skills, and hooks.
//!
//! Plain Rust, no Python. Handlers are trait objects so that Python
//! callables (see `crate::dialects`) and native Rust closures sit side by side.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::core::hooks::{BoxFuture, HookBus, HookEntry, HookEvent, ToolCallContext};
use crate::core::outcome::{PluginError, Renderer};

/// What a tool handler hands back: its result text, or the failure that
/// dispatch turns into [`ToolOutcome::Raised`](crate::core::outcome::ToolOutcome).
pub enum ToolReturn {
    Ready(Result<String, PluginError>),
    Pending(BoxFuture<Result<String, PluginError>>),
}

/// A tool's implementation.
pub trait ToolHandler: Send + Sync + 'static {
    /// The availability check (`check_fn`), if the tool has one: `Ok(false)`
    /// means unavailable, `Err` is the check's own failure.
    fn check(&self) -> Option<Result<bool, PluginError>> {
        None
    }
    /// Why [`check`](Self::check) said no (`Ok(false)`): by default its
    /// `check_fn`; a tool that depends on something else names it.
    fn unavailability(&self) -> crate::core::outcome::Unavailability {
        crate::core::outcome::Unavailability::CheckFn
    }
    /// Run the tool with `ctx.params` as its arguments.
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn;
    /// Whether the handler reads the Rust `ctx.params` (native and built-in
    /// tools). A Python handler reads the dialect's own arguments object,
    /// which hooks edit in place; a Rust one gets those edits copied back.
    fn reads_rust_params(&self) -> bool {
        true
    }
    /// Whether this failure of the tool ends the turn after its batch
    /// (Felix's `fatal=True` tool raising).
    fn fatal(&self, _error: &PluginError) -> bool {
        false
    }
    /// Shown, once per call before its first hook, the call's context, the
    /// tool and the registry the call runs in: a handler that can run some
    /// of the call's hooks together with itself (an isolated plugin's tool
    /// with that plugin's own hooks, in one round trip to its worker) plans
    /// that here. The hooks still fire as always. By default, nothing.
    fn prepare(&self, ctx: &mut ToolCallContext, tool: &Tool, registry: &Registry) {
        let _ = (ctx, tool, registry);
    }
}

/// A native Rust tool from a synchronous closure.
pub struct FnTool<F>(pub F);

impl<F> ToolHandler for FnTool<F>
where
    F: Fn(&Map<String, Value>) -> Result<String, String> + Send + Sync + 'static,
{
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        ToolReturn::Ready((self.0)(&ctx.params).map_err(PluginError::native))
    }
}

/// A native Rust tool from an async closure.
pub struct AsyncFnTool<F>(pub F);

impl<F> ToolHandler for AsyncFnTool<F>
where
    F: Fn(Map<String, Value>) -> BoxFuture<Result<String, String>> + Send + Sync + 'static,
{
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let pending = (self.0)(ctx.params.clone());
        ToolReturn::Pending(Box::pin(async move {
            pending.await.map_err(PluginError::native)
        }))
    }
}

/// A tool as listed to users and offered to models.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The JSON Schema of the arguments (unwrapped from any OpenAI envelope).
    pub parameters: Value,
    /// Key of the plugin that registered it (`native` for Rust tools).
    pub plugin: String,
    /// The group the tool belongs to (Flowly's `toolset=`; "" for none).
    pub toolset: String,
    /// Environment variables the tool needs (Flowly's `requires_env=`): it
    /// is unavailable while one is unset, and `plugins doctor` names it.
    pub requires_env: Vec<String>,
}

/// A registered tool.
#[derive(Clone)]
pub struct Tool {
    pub spec: ToolSpec,
    /// The compiled argument schema, once a call needed it (shared by the
    /// tool's copies); `None` inside when the schema does not compile.
    validator: Arc<std::sync::OnceLock<Option<jsonschema::Validator>>>,
    /// Why the schema cannot be used at all (too deep): calls are refused.
    pub(crate) unusable_schema: Option<String>,
    pub handler: Arc<dyn ToolHandler>,
    /// Its output is terminal output: `exec_output_rewrite` sees it
    /// before the usual post hooks (the built-in `exec`).
    pub terminal: bool,
    /// Renders its failed outcomes, when its dialect has its own result
    /// strings (Hermes's JSON errors); else the registry's renderer.
    pub renderer: Option<Arc<dyn Renderer>>,
    /// Hermes's collision rule: the tool may not take the name of a tool of
    /// another toolset (it is refused, the earlier one stays). Off by
    /// default: the last writer wins.
    pub shadows_only_own_toolset: bool,
}

impl Tool {
    /// Build a tool. Its argument schema is compiled at its first call
    /// (`Tool::validator`), not here: a start that loads 100 plugins and
    /// calls a few of their tools (or none: `plugins list`) compiled 100
    /// schemas, a third of plughost's own work per plugin. Only a schema
    /// too deep to compile safely is refused here.
    pub fn new(mut spec: ToolSpec, handler: Arc<dyn ToolHandler>) -> Tool {
        let depth = json_depth(&spec.parameters);
        let unusable_schema = if depth > MAX_SCHEMA_DEPTH {
            // Not kept: even dropping so deep a value recurses past the stack.
            let deep = std::mem::replace(&mut spec.parameters, json!({"type": "object"}));
            dismantle(deep);
            // Compiling (or validating against) it could overflow the stack.
            tracing::warn!(
                tool = %spec.name,
                plugin = %spec.plugin,
                "the tool's parameter schema nests {depth} levels deep (at most {MAX_SCHEMA_DEPTH}); calls are refused until it is flattened"
            );
            Some(format!(
                "the tool's parameter schema nests {depth} levels deep (at most {MAX_SCHEMA_DEPTH}); the plugin must flatten it"
            ))
        } else {
            None
        };
        let validator = Arc::new(std::sync::OnceLock::new());
        Tool {
            spec,
            validator,
            unusable_schema,
            handler,
            terminal: false,
            renderer: None,
            shadows_only_own_toolset: false,
        }
    }

    /// The compiled argument schema, compiled at the first call that needs
    /// it. `None`: nothing to check (a schema that is not valid JSON Schema
    /// is kept for listing but not enforced, with a warning, so the plugin
    /// still works the way it did under its own host).
    pub(crate) fn validator(&self) -> Option<&jsonschema::Validator> {
        if self.unusable_schema.is_some() {
            return None;
        }
        self.validator
            .get_or_init(|| match jsonschema::validator_for(&self.spec.parameters) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(
                        tool = %self.spec.name,
                        plugin = %self.spec.plugin,
                        "the tool's parameter schema is not valid JSON Schema ({e}); arguments will not be validated"
                    );
                    None
                }
            })
            .as_ref()
    }

    /// A native tool from a synchronous Rust closure.
    pub fn from_fn<F>(name: &str, description: &str, parameters: Value, f: F) -> Tool
    where
        F: Fn(&Map<String, Value>) -> Result<String, String> + Send + Sync + 'static,
    {
        Tool::new(
            native_spec(name, description, parameters),
            Arc::new(FnTool(f)),
        )
    }

    /// A native tool from an async Rust closure.
    pub fn from_async_fn<F>(name: &str, description: &str, parameters: Value, f: F) -> Tool
    where
        F: Fn(Map<String, Value>) -> BoxFuture<Result<String, String>> + Send + Sync + 'static,
    {
        Tool::new(
            native_spec(name, description, parameters),
            Arc::new(AsyncFnTool(f)),
        )
    }
}

/// How deeply a tool's parameter schema may nest.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// How deeply a JSON value nests (a scalar is 0), without recursion (so a
/// value too deep to recurse over can still be measured).
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Drop a JSON value of any depth without recursing.
pub fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

fn native_spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
        plugin: NATIVE_OWNER.to_string(),
        ..Default::default()
    }
}

/// Owner name of contributions registered from Rust.
pub const NATIVE_OWNER: &str = "native";

/// What a command handler hands back: `Ok(None)` means no reply.
pub enum CommandReturn {
    Ready(Result<Option<String>, PluginError>),
    Pending(BoxFuture<Result<Option<String>, PluginError>>),
}

/// A slash command's implementation; receives everything after the name.
pub trait CommandHandler: Send + Sync + 'static {
    fn call(&self, raw_args: &str) -> CommandReturn;
}

impl<F> CommandHandler for F
where
    F: Fn(&str) -> Option<String> + Send + Sync + 'static,
{
    fn call(&self, raw_args: &str) -> CommandReturn {
        CommandReturn::Ready(Ok(self(raw_args)))
    }
}

/// A registered slash command.
#[derive(Clone)]
pub struct Command {
    pub name: String,
    pub description: String,
    pub args_hint: String,
    pub plugin: String,
    pub handler: Arc<dyn CommandHandler>,
}

/// A registered skill: `plugin:name` → a SKILL.md on disk.
#[derive(Clone, Debug, Serialize)]
pub struct Skill {
    /// `plugin:name`.
    pub name: String,
    pub plugin: String,
    pub description: String,
    pub path: PathBuf,
}

/// One contribution a plugin made while loading, committed to the
/// registry only if loading succeeded (so a failing plugin leaves nothing
/// behind). Dialects produce these; the host applies them.
pub enum Registration {
    Tool(Tool),
    Hook {
        /// `None` for a name no event matches (accepted, never fired).
        event: Option<HookEvent>,
        name: String,
        entry: HookEntry,
    },
    Command(Command),
    Skill(Skill),
    /// A background job a serving host runs on a schedule.
    Task(crate::core::schedule::ScheduledTask),
    /// A watcher of every tool call's outcome and every model call's usage.
    Observer(Arc<dyn crate::core::observers::CallObserver>),
    /// HTTP routes a serving host mounts.
    Routes(crate::core::http_app::RoutesEntry),
    /// An authentication mode a serving host can be started with.
    Authenticator(crate::core::http_app::AuthMode),
    /// A model provider (`--model NAME:MODEL`), kept in the host's profiles.
    ModelProvider(crate::core::model_profiles::ModelProfile),
}

/// Normalise a slash-command name: strip, drop a leading `/`, lowercase,
/// spaces to `-` (the Flowly rule; lookups use it too).
pub fn normalize_command_name(name: &str) -> String {
    let trimmed = name.trim();
    let trimmed = trimmed.strip_prefix('/').unwrap_or(trimmed);
    trimmed
        .trim()
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("-")
}

/// Command names a plugin may not register (the rows marked `reserved` in
/// the command table, [`crate::core::commands::BUILTINS`]), as the
/// dialects' refusal names them; a test there keeps it equal to the table.
pub const RESERVED_COMMANDS: [&str; 4] = ["new", "clear", "compact", "help"];

/// Tools registered while the host runs (Codumentor's
/// `agent.tool_registry.register_tool` during turns): asked for a name the
/// registry itself does not hold, so they go through the same pipeline.
pub trait RuntimeTools: Send + Sync + 'static {
    fn tool(&self, name: &str) -> Option<Tool>;
}

/// What happens when a tool takes a name another owner already registered:
/// a setting of the registry (and of the host builder), not of a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollisionPolicy {
    /// The later tool replaces the earlier one, with a warning naming both.
    LastWins,
    /// The earlier tool stays; the later one is not registered (warned).
    KeepFirst,
    /// A collision is an error: the later tool is not registered and the
    /// host does not build ([`Registry::refused`] lists them).
    Refuse,
}

/// A tool a [`CollisionPolicy::Refuse`] registry turned away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedTool {
    pub tool: String,
    /// Who registered it first (and keeps it).
    pub owner: String,
    /// Who tried to register it again.
    pub refused: String,
}

/// Every contribution, keyed for O(1) lookup.
#[derive(Clone, Default)]
pub struct Registry {
    /// The collision rule for every tool, when set; unset, each source
    /// keeps its own default (last writer wins; a Hermes tool registered
    /// without `override=True` keeps a tool of another toolset, as Hermes's
    /// registry does).
    pub(crate) collision: Option<CollisionPolicy>,
    refused: Vec<RefusedTool>,
    tools: HashMap<String, Tool>,
    commands: HashMap<String, Command>,
    skills: HashMap<String, Skill>,
    /// Scheduled jobs, by name, in registration order.
    tasks: Vec<crate::core::schedule::ScheduledTask>,
    /// Audit and usage observers, in registration order.
    observers: Vec<Arc<dyn crate::core::observers::CallObserver>>,
    /// Plugins' HTTP routes, in registration order.
    routes: Vec<crate::core::http_app::RoutesEntry>,
    /// Plugins' authentication modes, by mode.
    auth_modes: Vec<crate::core::http_app::AuthMode>,
    pub(crate) hooks: HookBus,
    /// How long an async hook may take before it is skipped (and counted).
    pub(crate) hook_timeout: Option<std::time::Duration>,
    /// Renders outcomes as result strings; the standard (Flowly) strings when unset.
    pub(crate) renderer: Option<Arc<dyn Renderer>>,
    /// Tools registered while the host runs, if a dialect has such.
    pub(crate) runtime_tools: Option<Arc<dyn RuntimeTools>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Add a tool; the last writer wins on a name collision, with a warning
    /// naming both owners, unless the new tool may only shadow its own
    /// toolset (then the earlier one of another toolset stays, with a warning).
    pub fn add_tool(&mut self, tool: Tool) -> Option<Tool> {
        match self.collision {
            None => {}
            Some(CollisionPolicy::LastWins) => return self.replace_tool(tool),
            Some(policy) => {
                if let Some(existing) = self.tools.get(&tool.spec.name) {
                    tracing::warn!(
                        "tool '{}' of '{}' is not registered: '{}' already registered it (the host keeps the first)",
                        tool.spec.name,
                        tool.spec.plugin,
                        existing.spec.plugin,
                    );
                    if policy == CollisionPolicy::Refuse {
                        self.refused.push(RefusedTool {
                            tool: tool.spec.name.clone(),
                            owner: existing.spec.plugin.clone(),
                            refused: tool.spec.plugin.clone(),
                        });
                    }
                    return None;
                }
                return self.replace_tool(tool);
            }
        }
        if tool.shadows_only_own_toolset {
            if let Some(existing) = self.tools.get(&tool.spec.name) {
                if existing.spec.toolset != tool.spec.toolset {
                    let shown = |t: &str| {
                        if t.is_empty() {
                            "none".to_string()
                        } else {
                            t.to_string()
                        }
                    };
                    tracing::warn!(
                        "tool '{}' of '{}' (toolset {}) is not registered: '{}' already registered it (toolset {}); pass override=True to replace it",
                        tool.spec.name,
                        tool.spec.plugin,
                        shown(&tool.spec.toolset),
                        existing.spec.plugin,
                        shown(&existing.spec.toolset),
                    );
                    return None;
                }
            }
        }
        self.replace_tool(tool)
    }

    /// Set the collision rule for every tool added from now on.
    pub fn set_collision_policy(&mut self, policy: CollisionPolicy) {
        self.collision = Some(policy);
    }

    /// The tools a [`CollisionPolicy::Refuse`] registry turned away.
    pub fn refused(&self) -> &[RefusedTool] {
        &self.refused
    }

    /// Register `tool`, the last writer winning (warned).
    fn replace_tool(&mut self, tool: Tool) -> Option<Tool> {
        let previous = self.tools.insert(tool.spec.name.clone(), tool);
        if let Some(prev) = &previous {
            let now = &self.tools[&prev.spec.name];
            tracing::warn!(
                "tool '{}' of '{}' replaces the one registered by '{}' (last writer wins)",
                prev.spec.name,
                now.spec.plugin,
                prev.spec.plugin
            );
        }
        previous
    }

    /// Add a command (name already normalised); a later owner overriding an
    /// earlier one's command is warned about.
    pub fn add_command(&mut self, command: Command) -> Option<Command> {
        let previous = self.commands.insert(command.name.clone(), command);
        if let Some(prev) = &previous {
            let now = &self.commands[&prev.name];
            tracing::warn!(
                "command '/{}' of '{}' overrides the one registered by '{}'",
                prev.name,
                now.plugin,
                prev.plugin
            );
        }
        previous
    }

    pub fn add_skill(&mut self, skill: Skill) {
        self.skills.insert(skill.name.clone(), skill);
    }

    /// Add a scheduled job; a later one of the same name replaces it, with
    /// a warning naming both plugins.
    pub fn add_task(&mut self, task: crate::core::schedule::ScheduledTask) {
        if let Some(old) = self.tasks.iter_mut().find(|t| t.name == task.name) {
            tracing::warn!(
                "scheduled task '{}' of '{}' replaces the one of '{}'",
                task.name,
                task.plugin,
                old.plugin
            );
            *old = task;
        } else {
            self.tasks.push(task);
        }
    }

    /// Scheduled jobs in registration order.
    pub fn tasks(&self) -> &[crate::core::schedule::ScheduledTask] {
        &self.tasks
    }

    /// Watch every call from now on ([`crate::core::observers`]).
    pub fn add_observer(&mut self, observer: Arc<dyn crate::core::observers::CallObserver>) {
        self.observers.push(observer);
    }

    /// Whether anything watches calls (the pipeline skips the bookkeeping else).
    pub fn observed(&self) -> bool {
        !self.observers.is_empty()
    }

    /// Tell every observer of a finished tool call.
    pub fn observe_tool_call(&self, call: &crate::core::observers::ObservedToolCall<'_>) {
        for o in &self.observers {
            o.tool_call(call);
        }
    }

    /// Tell every observer of a model call's usage.
    pub fn observe_model_call(&self, call: &crate::core::observers::ObservedModelCall<'_>) {
        for o in &self.observers {
            o.model_call(call);
        }
    }

    /// Add a plugin's HTTP routes (mounted by `plughost serve`).
    pub fn add_routes(&mut self, routes: crate::core::http_app::RoutesEntry) {
        self.routes.push(routes);
    }

    /// Plugins' HTTP routes in registration order.
    pub fn routes(&self) -> &[crate::core::http_app::RoutesEntry] {
        &self.routes
    }

    /// Add an authentication mode; a later one of the same mode replaces it.
    pub fn add_auth_mode(&mut self, mode: crate::core::http_app::AuthMode) {
        self.auth_modes.retain(|m| m.mode != mode.mode);
        self.auth_modes.push(mode);
    }

    /// The authentication modes plugins registered.
    pub fn auth_modes(&self) -> &[crate::core::http_app::AuthMode] {
        &self.auth_modes
    }

    /// The scheduled job named `name`.
    pub fn task(&self, name: &str) -> Option<&crate::core::schedule::ScheduledTask> {
        self.tasks.iter().find(|t| t.name == name)
    }

    /// Subscribe a callback; see [`HookBus::add`].
    pub fn add_hook(&mut self, event: HookEvent, entry: HookEntry) {
        self.hooks.add(event, entry);
    }

    /// Subscribe a before/after pair; see [`HookBus::wrap`].
    pub fn add_wrapper(
        &mut self,
        lane: &'static crate::core::hooks::Lane,
        entry: crate::core::wrappers::WrapEntry,
    ) -> Result<(), String> {
        self.hooks.wrap(lane, entry)
    }

    #[inline]
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// A tool registered while the host runs (see [`RuntimeTools`]).
    pub fn runtime_tool(&self, name: &str) -> Option<Tool> {
        self.runtime_tools.as_ref()?.tool(name)
    }

    /// Ask `source` for tools the registry does not hold.
    pub fn set_runtime_tools(&mut self, source: Arc<dyn RuntimeTools>) {
        self.runtime_tools = Some(source);
    }

    /// Tools sorted by name.
    pub fn tools(&self) -> Vec<&Tool> {
        let mut v: Vec<&Tool> = self.tools.values().collect();
        v.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        v
    }

    /// Look a command up by any spelling of its name (`/Foo`, `foo`).
    pub fn command(&self, name: &str) -> Option<&Command> {
        self.commands.get(&normalize_command_name(name))
    }

    /// Commands sorted by name.
    pub fn commands(&self) -> Vec<&Command> {
        let mut v: Vec<&Command> = self.commands.values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn skill(&self, qualified: &str) -> Option<&Skill> {
        self.skills.get(qualified)
    }

    /// Skills sorted by qualified name.
    pub fn skills(&self) -> Vec<&Skill> {
        let mut v: Vec<&Skill> = self.skills.values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn hooks(&self) -> &HookBus {
        &self.hooks
    }

    /// Render results with `renderer` instead of the standard strings.
    pub fn set_renderer(&mut self, renderer: Arc<dyn Renderer>) {
        self.renderer = Some(renderer);
    }

    /// The renderer in force.
    pub fn renderer(&self) -> &dyn Renderer {
        match &self.renderer {
            Some(r) => r.as_ref(),
            None => &crate::core::outcome::StandardRenderer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_command_name;

    #[test]
    fn command_names_are_normalised() {
        assert_eq!(normalize_command_name(" /Foo Bar "), "foo-bar");
        assert_eq!(normalize_command_name("ping"), "ping");
        assert_eq!(normalize_command_name("/HELP"), "help");
    }

    fn tool(owner: &str, toolset: &str, own_toolset_only: bool) -> super::Tool {
        let mut t = super::Tool::from_fn("t", "", serde_json::json!({}), |_| Ok(String::new()));
        t.spec.plugin = owner.into();
        t.spec.toolset = toolset.into();
        t.shadows_only_own_toolset = own_toolset_only;
        t
    }

    #[test]
    fn the_collision_policy_is_the_registrys_and_unset_each_source_keeps_its_rule() {
        use super::{CollisionPolicy, Registry};
        let owner = |r: &Registry| r.tool("t").unwrap().spec.plugin.clone();
        // Unset: the last writer wins, except a Hermes tool without override.
        let mut r = Registry::new();
        r.add_tool(tool("a", "x", false));
        r.add_tool(tool("b", "y", false));
        assert_eq!(owner(&r), "b");
        r.add_tool(tool("c", "z", true));
        assert_eq!(owner(&r), "b");
        // Set: one rule for every tool.
        let mut r = Registry::new();
        r.set_collision_policy(CollisionPolicy::LastWins);
        r.add_tool(tool("a", "x", false));
        r.add_tool(tool("c", "z", true));
        assert_eq!(owner(&r), "c");
        let mut r = Registry::new();
        r.set_collision_policy(CollisionPolicy::KeepFirst);
        r.add_tool(tool("a", "x", false));
        r.add_tool(tool("b", "y", false));
        assert_eq!(owner(&r), "a");
        assert!(r.refused().is_empty());
        let mut r = Registry::new();
        r.set_collision_policy(CollisionPolicy::Refuse);
        r.add_tool(tool("a", "x", false));
        r.add_tool(tool("b", "y", false));
        assert_eq!(owner(&r), "a");
        assert_eq!(r.refused().len(), 1);
        assert_eq!(r.refused()[0].refused, "b");
    }
}
