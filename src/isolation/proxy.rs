//! The registry's view of an isolated plugin: tools, hooks and commands
//! whose handlers forward each call to the plugin's worker, so to the
//! registry, dispatch and the agent loop it looks like any other plugin.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};

use super::protocol::{Contribution, PayloadWire, Reply, Request, ToolCallWire};
use super::supervisor::{Subject, Supervisor};
use crate::hooks::{
    CallState, HookCallback, HookEntry, HookError, HookEvent, HookPayload, HookReturn, HookStats,
    ToolCallContext,
};
use crate::outcome::{PluginError, PluginFault, Renderer};
use crate::registry::{
    Command, CommandHandler, CommandReturn, Registration, Skill, Tool, ToolHandler, ToolReturn,
    ToolSpec,
};

/// Turn a worker's announced contributions into registrations whose
/// handlers reach it through `sup`.
pub fn registrations(sup: &Supervisor, contributions: Vec<Contribution>) -> Vec<Registration> {
    let key = sup.key().to_string();
    let renderer = dialect_renderer(sup.dialect());
    contributions
        .into_iter()
        .map(|c| match c {
            Contribution::Tool {
                name,
                description,
                parameters,
                terminal,
                toolset,
                requires_env,
                shadows_only_own_toolset,
                own_renderer,
            } => {
                let handler = ProxyTool {
                    sup: sup.clone(),
                    name: name.as_str().into(),
                    check: AtomicU8::new(CHECK_UNKNOWN),
                };
                let mut tool = Tool::new(
                    ToolSpec {
                        name,
                        description,
                        parameters,
                        plugin: key.clone(),
                        toolset,
                        requires_env,
                    },
                    Arc::new(handler),
                );
                tool.terminal = terminal;
                tool.shadows_only_own_toolset = shadows_only_own_toolset;
                if own_renderer {
                    match &renderer {
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
            Contribution::Hook {
                event,
                name,
                label,
                priority,
                index,
            } => Registration::Hook {
                event: event.as_deref().and_then(HookEvent::from_name),
                name,
                entry: HookEntry {
                    owner: key.clone(),
                    label,
                    priority,
                    callback: Arc::new(ProxyHook {
                        sup: sup.clone(),
                        index,
                    }),
                    stats: Arc::new(HookStats::default()),
                },
            },
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
        })
        .collect()
}

/// The renderer of a dialect whose tools render their own results (the
/// renderer is Rust code: it cannot cross from the worker, so the tool
/// says it has one and plughost uses its dialect's here).
fn dialect_renderer(dialect: &str) -> Option<Arc<dyn Renderer>> {
    match dialect {
        "hermes" => Some(Arc::new(crate::dialects::hermes::render::HermesRenderer)),
        _ => None,
    }
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
}

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
        let call = ToolCallWire::of(ctx);
        let request = Request::Tool {
            tool: self.name.to_string(),
            call,
        };
        let sup = self.sup.clone();
        let what = Subject::Tool(self.name.clone());
        ToolReturn::Pending(Box::pin(async move {
            match sup.request(request, what).await? {
                Reply::Tool { result } => result,
                other => Err(out_of_protocol(&sup, &other)),
            }
        }))
    }
}

/// Arguments edited by an isolated plugin's hook, kept on the call's
/// context: dispatch hands them to the handler (see
/// [`CallState::edited_params`]) and later hooks see them.
struct IsolatedParams(Arc<Mutex<Option<Map<String, Value>>>>);

impl CallState for IsolatedParams {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn edited_params(&mut self) -> Option<Map<String, Value>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A hook callback of an isolated plugin.
struct ProxyHook {
    sup: Supervisor,
    index: usize,
}

impl HookCallback for ProxyHook {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let mut payload = payload;
        // Where edits to the arguments go back to, for tool events.
        let mut edits = None;
        let wire = match &mut payload {
            HookPayload::Tool(ctx) => {
                let slot = match ctx.dialect.get_mut::<IsolatedParams>() {
                    Some(state) => state.0.clone(),
                    None => {
                        // An in-process plugin's hook may hold the call's
                        // state, with its edits: they carry over into ours
                        // (and an in-process hook after this one starts from
                        // ours), so no edit is lost either way round.
                        let slot = Arc::new(Mutex::new(ctx.dialect.edited_params()));
                        ctx.dialect.set(IsolatedParams(slot.clone()));
                        slot
                    }
                };
                let current = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let mut wire = ToolCallWire::of(ctx);
                if let Some(params) = current {
                    wire.params = params;
                }
                edits = Some(slot);
                PayloadWire::Tool(wire)
            }
            other => match PayloadWire::of(other) {
                Some(wire) => wire,
                None => {
                    return HookReturn::Ready(Err(HookError::NotRun(format!(
                        "{event} is not forwarded to an isolated plugin"
                    ))))
                }
            },
        };
        let request = Request::Hook {
            index: self.index,
            event: event.name().to_string(),
            payload: wire,
        };
        let sup = self.sup.clone();
        let what = Subject::Hook(event);
        HookReturn::Pending(Box::pin(async move {
            match sup.request(request, what).await {
                Ok(Reply::Hook { answer, params }) => {
                    if let (Some(params), Some(slot)) = (params, edits) {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(params);
                    }
                    answer.map(Into::into).map_err(|e| e.into_error(event))
                }
                Ok(other) => Err(HookError::Raised(out_of_protocol(&sup, &other))),
                Err(e) => Err(HookError::Raised(e)),
            }
        }))
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
