//! The registry's view of an isolated plugin: tools, hooks and commands
//! whose handlers forward each call to the plugin's worker, so to the
//! registry, dispatch and the agent loop it looks like any other plugin.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod hook;
mod parts;
mod platform;
mod routes;
mod turn;

pub(super) use hook::IsolatedParams;
pub use turn::SessionStates;

use super::batch::{Claim, HookTable};
use super::protocol::{event_named, Contribution, Reply, Request, Step, ToolCallWire};
use super::supervisor::{Subject, Supervisor, WeakSupervisor};
use crate::core::hooks::{HookEntry, HookStats, ToolCallContext};
use crate::core::outcome::{PluginError, PluginFault};
use crate::core::registry::{
    Command, CommandHandler, CommandReturn, Registration, Skill, Tool, ToolHandler, ToolReturn,
    ToolSpec,
};
use hook::ProxyHook;

/// The isolated plugins that may register tools while running
/// (Codumentor's `agent.tool_registry`), for [`runtime_tool`].
static RUNTIME_SOURCES: Mutex<Vec<WeakSupervisor>> = Mutex::new(Vec::new());

/// How long a worker may take to say whether it has a runtime tool (the
/// caller waits: the lookup is part of resolving a tool name).
const RUNTIME_TOOL_LIMIT: Duration = Duration::from_secs(1);

/// A tool an isolated plugin of the host at `home` registered while
/// running, reached through its worker like its other tools; asked each
/// time, as the in-process registry is (a plugin may replace its tools).
/// Only running workers are asked (a worker that is not running has no
/// runtime tools: they are registered during turns), and a slow answer
/// counts as "no" without stopping the worker: an unknown tool name (a
/// model's invention, a typo) must never start or kill a worker.
pub fn runtime_tool(home: &std::path::Path, name: &str) -> Option<Tool> {
    let sources: Vec<Supervisor> = {
        let mut list = RUNTIME_SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.upgrade().is_some());
        list.iter().filter_map(WeakSupervisor::upgrade).collect()
    };
    for sup in sources.iter().filter(|s| s.home() == home) {
        let request = Request::RuntimeTool {
            name: name.to_string(),
        };
        let found = match sup.ask_if_running(request, RUNTIME_TOOL_LIMIT) {
            None => None,
            Some(Ok(Reply::RuntimeTool { found })) => found,
            Some(Ok(other)) => {
                tracing::warn!("{}", out_of_protocol(sup, &other));
                None
            }
            Some(Err(e)) => {
                tracing::warn!(
                    "cannot ask plugin '{}' for tool '{name}': {}",
                    sup.key(),
                    PluginError::fault(e)
                );
                None
            }
        };
        if let Some(found) = found {
            let handler = ProxyTool {
                sup: sup.clone(),
                name: name.into(),
                check: AtomicU8::new(CHECK_UNKNOWN),
                fatal: Arc::default(),
                hooks: Arc::default(),
            };
            let spec = ToolSpec {
                name: name.to_string(),
                description: found.description,
                parameters: found.parameters,
                plugin: found.plugin,
                ..Default::default()
            };
            let mut tool = Tool::new(spec, Arc::new(handler));
            tool.renderer = sup
                .dialect_table()
                .and_then(|d| d.abilities().running_tools?.renderer());
            return Some(tool);
        }
    }
    None
}

/// Turn a worker's announced contributions into registrations whose
/// handlers reach it through `sup`.
pub fn registrations(sup: &Supervisor, contributions: Vec<Contribution>) -> Vec<Registration> {
    if sup
        .dialect_table()
        .is_some_and(|d| d.abilities().running_tools.is_some())
    {
        let mut list = RUNTIME_SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.upgrade().is_some());
        list.push(sup.downgrade());
    }
    let key = sup.key().to_string();
    // A dialect whose tools render their own results: the renderer is Rust
    // code, it cannot cross from the worker, so the tool says it has one
    // and plughost uses its dialect's here.
    let renderer = sup
        .dialect_table()
        .and_then(|d| d.abilities().renderers?.own_renderer());
    let hooks = Arc::new(HookTable::default());
    platform::take(sup, contributions)
        .into_iter()
        .filter_map(|c| {
            Some(match c {
                Contribution::Tool {
                    name,
                    description,
                    parameters,
                    terminal,
                    toolset,
                    requires_env,
                    shadows_only_own_toolset,
                    own_renderer,
                } => proxy_tool(
                    sup,
                    renderer.as_ref(),
                    ToolSpec {
                        name,
                        description,
                        parameters,
                        plugin: key.clone(),
                        toolset,
                        requires_env,
                    },
                    terminal,
                    shadows_only_own_toolset,
                    own_renderer,
                    &hooks,
                ),
                Contribution::Hook {
                    event,
                    name,
                    event_name,
                    label,
                    priority,
                    index,
                } => {
                    let row = sup
                        .dialect_table()
                        .and_then(|d| d.events().iter().find(|r| r.name == name));
                    let around = match event.as_deref().and_then(event_named) {
                        Some(lane @ crate::core::hooks::HookEvent::Lane(id))
                            if crate::core::pipeline::middleware::runs_around(id.lane()) =>
                        {
                            Some(lane.name())
                        }
                        _ => None,
                    };
                    let callback: Arc<dyn crate::core::hooks::HookCallback> = Arc::new(ProxyHook {
                        sup: sup.clone(),
                        index,
                        event_name,
                        row,
                        shown: std::sync::Arc::from(name.as_str()),
                        around,
                    });
                    hooks.add(&callback, index);
                    Registration::Hook {
                        event: event.as_deref().and_then(event_named),
                        name,
                        entry: HookEntry {
                            owner: key.clone(),
                            label,
                            priority,
                            callback,
                            stats: Arc::new(HookStats::default()),
                        },
                    }
                }
                Contribution::Command {
                    name,
                    description,
                    args_hint,
                } => Registration::Command(Command {
                    name: name.clone(),
                    description,
                    args_hint,
                    plugin: key.clone(),
                    handler: Arc::new(ProxyCommand {
                        sup: sup.clone(),
                        name: name.as_str().into(),
                    }),
                }),
                Contribution::Skill {
                    name,
                    description,
                    path,
                } => Registration::Skill(Skill {
                    name,
                    plugin: key.clone(),
                    description,
                    path,
                }),
                Contribution::Platform { .. } => return None,
                // A server part or a model provider.
                other => return parts::registration(sup, other),
            })
        })
        .collect()
}

/// A worker's tool as a registry tool whose calls go to the worker; one
/// that renders its own results gets its dialect's renderer here (Rust
/// code, it cannot cross from the worker).
fn proxy_tool(
    sup: &Supervisor,
    renderer: Option<&Arc<dyn crate::core::outcome::Renderer>>,
    spec: ToolSpec,
    terminal: bool,
    shadows_only_own_toolset: bool,
    own_renderer: bool,
    hooks: &Arc<HookTable>,
) -> Registration {
    let handler = ProxyTool {
        sup: sup.clone(),
        name: spec.name.as_str().into(),
        check: AtomicU8::new(CHECK_UNKNOWN),
        fatal: Arc::default(),
        hooks: hooks.clone(),
    };
    let key = spec.plugin.clone();
    let mut tool = Tool::new(spec, Arc::new(handler));
    tool.terminal = terminal;
    tool.shadows_only_own_toolset = shadows_only_own_toolset;
    if own_renderer {
        match renderer {
            Some(r) => tool.renderer = Some(r.clone()),
            None => tracing::warn!(
                "tool '{}' of isolated plugin '{key}' renders its own results, but this build has no renderer for dialect '{}'; it shows the standard ones",
                tool.spec.name,
                sup.dialect()
            ),
        }
    }
    Registration::Tool(tool)
}

fn out_of_protocol(sup: &Supervisor, reply: &Reply) -> PluginError {
    let problem = match reply {
        Reply::Refused { problem } => problem.clone(),
        other => format!("its worker answered out of protocol ({other:?})"),
    };
    PluginError::fault(PluginFault::Unavailable {
        plugin: sup.key().to_string(),
        problem,
    })
}

const CHECK_UNKNOWN: u8 = 0;
const CHECK_NONE: u8 = 1;
const CHECK_SOME: u8 = 2;

/// How long a `check_fn` may take: the pipeline asks for it synchronously,
/// so it is bounded here (past it the worker is killed).
pub const CHECK_LIMIT: Duration = Duration::from_secs(10);

/// A tool of an isolated plugin.
struct ProxyTool {
    sup: Supervisor,
    name: Arc<str>,
    /// Whether the tool has a `check_fn`: learnt on the first call (a
    /// tool's check is fixed when it registers), so later calls without
    /// one skip the round trip.
    check: AtomicU8,
    /// Failures the worker's handler called fatal, until dispatch asks
    /// ([`ToolHandler::fatal`] right after the call returns them). The
    /// verdict is a function of the failure, so an equal one is as fatal.
    fatal: Arc<Mutex<Vec<PluginError>>>,
    /// Its plugin's hooks, for a call's [plan](super::batch).
    hooks: Arc<HookTable>,
}

/// At most this many fatal failures wait for dispatch to ask about them
/// (more only when calls were dropped after failing, before being asked).
const FATAL_KEPT: usize = 64;

impl ToolHandler for ProxyTool {
    fn check(&self) -> Option<Result<bool, PluginError>> {
        if self.check.load(Ordering::Relaxed) == CHECK_NONE {
            return None;
        }
        let request = Request::Check {
            tool: self.name.to_string(),
        };
        let what = format!("the check_fn of tool '{}'", self.name);
        match self.sup.request_blocking(request, CHECK_LIMIT, &what) {
            Ok(Reply::Checked { result: None }) => {
                self.check.store(CHECK_NONE, Ordering::Relaxed);
                None
            }
            Ok(Reply::Checked { result: Some(r) }) => {
                self.check.store(CHECK_SOME, Ordering::Relaxed);
                Some(r)
            }
            Ok(other) => Some(Err(out_of_protocol(&self.sup, &other))),
            // The worker is down: the call itself reports why.
            Err(e) if self.check.load(Ordering::Relaxed) == CHECK_UNKNOWN => {
                let _ = e;
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let sup = self.sup.clone();
        let what = Subject::Tool(self.name.clone());
        let fatal = self.fatal.clone();
        if let Some(plan) = super::batch::of_call(ctx, &self.sup) {
            if let Claim::Planned(first) = plan.claim(&Step::Tool, || ToolCallWire::of(ctx)) {
                if first.is_some() {
                    // The batch starts here, with the arguments as they are
                    // now (a loop-point lane may have replaced them since
                    // the last hook): the view the worker's hooks' answers
                    // are measured against, so it is plughost's too.
                    if let Some(state) = ctx.dialect.get_mut::<IsolatedParams>() {
                        *state.params.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(ctx.params.clone());
                    }
                }
                return ToolReturn::Pending(Box::pin(async move {
                    let reply = plan.take(first, what).await;
                    tool_result(&sup, &fatal, reply?)
                }));
            }
        }
        let request = Request::Tool {
            tool: self.name.to_string(),
            call: ToolCallWire::of(ctx),
        };
        ToolReturn::Pending(Box::pin(async move {
            let reply = sup.request(request, what).await?;
            tool_result(&sup, &fatal, reply)
        }))
    }

    /// A call whose tool has no `check_fn` and whose plugin's hooks run
    /// next to it gets a [plan](super::batch): one round trip for them all.
    fn prepare(
        &self,
        ctx: &mut ToolCallContext,
        tool: &crate::core::registry::Tool,
        registry: &crate::core::registry::Registry,
    ) {
        if self.check.load(Ordering::Relaxed) != CHECK_NONE {
            return; // unknown until the first call asked; or asked each call
        }
        if let Some(plan) = super::batch::plan(&self.sup, &self.name, tool, registry, &self.hooks) {
            let edited = ctx.dialect.edited_params();
            ctx.dialect.set(IsolatedParams {
                params: Arc::new(Mutex::new(edited)),
                plan: Some(Arc::new(plan)),
            });
        }
    }

    /// The worker's handler's verdict on this failure; a failure of the
    /// worker itself (a crash, a limit) has none and is not fatal: the
    /// turn goes on, as after any tool failure that is not the tool's own.
    fn fatal(&self, error: &PluginError) -> bool {
        let mut list = self.fatal.lock().unwrap_or_else(|e| e.into_inner());
        match list.iter().position(|e| e == error) {
            Some(at) => {
                list.remove(at);
                true
            }
            None => false,
        }
    }
}

/// What a tool's worker answered, as the call's result.
fn tool_result(
    sup: &Supervisor,
    fatal: &Mutex<Vec<PluginError>>,
    reply: Reply,
) -> Result<String, PluginError> {
    match reply {
        Reply::Tool { result } => result,
        Reply::ToolFailed { error, fatal: true } => {
            let mut list = fatal.lock().unwrap_or_else(|e| e.into_inner());
            if list.len() >= FATAL_KEPT {
                list.remove(0);
            }
            list.push(error.clone());
            Err(error)
        }
        Reply::ToolFailed { error, .. } => Err(error),
        other => Err(out_of_protocol(sup, &other)),
    }
}
/// A slash command of an isolated plugin.
struct ProxyCommand {
    sup: Supervisor,
    name: Arc<str>,
}

impl CommandHandler for ProxyCommand {
    fn call(&self, raw_args: &str) -> CommandReturn {
        let request = Request::Command {
            name: self.name.to_string(),
            args: raw_args.to_string(),
        };
        let sup = self.sup.clone();
        let what = Subject::Command(self.name.clone());
        CommandReturn::Pending(Box::pin(async move {
            match sup.request(request, what).await? {
                Reply::Command { result } => result,
                other => Err(out_of_protocol(&sup, &other)),
            }
        }))
    }
}
