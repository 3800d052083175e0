//! The registry's view of an isolated plugin: tools, hooks and commands
//! whose handlers forward each call to the plugin's worker, so to the
//! registry, dispatch and the agent loop it looks like any other plugin.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};

use super::batch::{Claim, HookTable};
use super::protocol::{event_named, Contribution, PayloadWire, Reply, Request, Step, ToolCallWire};
use super::supervisor::{Subject, Supervisor, WeakSupervisor};
use crate::core::hooks::{
    CallState, HookCallback, HookEntry, HookError, HookEvent, HookPayload, HookReturn, HookStats,
    ToolCallContext, TurnScope,
};
use crate::core::outcome::{PluginError, PluginFault};
use crate::core::registry::{
    Command, CommandHandler, CommandReturn, Registration, Skill, Tool, ToolHandler, ToolReturn,
    ToolSpec,
};

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
    contributions
        .into_iter()
        // --- changed by rl7: server parts are not proxied (server_parts.rs) ---
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
                    let callback: Arc<dyn crate::core::hooks::HookCallback> = Arc::new(ProxyHook {
                        sup: sup.clone(),
                        index,
                        event_name,
                        label: label.clone(),
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
                Contribution::ServerPart { .. } => return None,
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

/// Arguments edited by an isolated plugin's hook, kept on the call's
/// context: dispatch hands them to the handler (see
/// [`CallState::edited_params`]) and later hooks see them; and the call's
/// [plan](super::batch), when its plugin's hooks go with its tool.
pub(super) struct IsolatedParams {
    params: Arc<Mutex<Option<Map<String, Value>>>>,
    pub(super) plan: Option<Arc<super::batch::Plan>>,
}

impl CallState for IsolatedParams {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn edited_params(&mut self) -> Option<Map<String, Value>> {
        self.params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A hook callback of an isolated plugin.
struct ProxyHook {
    sup: Supervisor,
    index: usize,
    /// The dialect's name of its event, for `hook_errors`.
    event_name: Option<String>,
    /// Its readable name, for its dialect's fail-closed message.
    label: String,
}

/// The number an isolated plugin's worker knows a turn by, kept in the
/// turn's scope; when the turn ends (its scope is dropped) every worker
/// that served it drops its state of the turn.
struct IsolatedTurn {
    number: u64,
    workers: Mutex<Vec<TurnWorker>>,
}

/// A worker serving a turn.
struct TurnWorker {
    sup: Supervisor,
    /// The crash count of the worker process that was handed the
    /// session's state this turn (a process started since is handed it
    /// again).
    handed: Option<u64>,
    /// The session's state it last reported this turn: what a process
    /// started after a crash goes on from.
    reported: Option<Value>,
}

impl IsolatedTurn {
    /// The turn of `scope`, noting that `sup` serves it.
    fn of(scope: &TurnScope, sup: &Supervisor) -> Option<Arc<IsolatedTurn>> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let turn = scope.slot("isolation", || IsolatedTurn {
            number: NEXT.fetch_add(1, Ordering::Relaxed),
            workers: Mutex::default(),
        })?;
        let mut workers = turn.workers.lock().unwrap_or_else(|e| e.into_inner());
        if !workers.iter().any(|w| w.sup.same(sup)) {
            workers.push(TurnWorker {
                sup: sup.clone(),
                handed: None,
                reported: None,
            });
        }
        drop(workers);
        Some(turn)
    }

    /// The session's state to hand `sup`'s worker with this request: once
    /// per turn and worker process, as soon as the turn owns its session
    /// (before, there is nothing read to hand over). The state as the turn
    /// started, not as it is now: the worker counts this turn's calls
    /// itself, as in-process plugins do on their own copy, and a value
    /// with some of them counted would count them twice.
    fn handover(&self, sup: &Supervisor, states: &SessionStates) -> Option<Value> {
        let baseline = states.baseline(sup.dialect())?;
        let crashes = sup.status().crashes;
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let worker = workers.iter_mut().find(|w| w.sup.same(sup))?;
        if worker.handed == Some(crashes) {
            return None;
        }
        worker.handed = Some(crashes);
        Some(worker.reported.clone().unwrap_or(baseline))
    }

    fn reported(&self, sup: &Supervisor, value: &Value) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(worker) = workers.iter_mut().find(|w| w.sup.same(sup)) {
            worker.reported = Some(value.clone());
        }
    }
}

impl Drop for IsolatedTurn {
    fn drop(&mut self) {
        let workers = self.workers.get_mut().unwrap_or_else(|e| e.into_inner());
        for worker in workers.drain(..) {
            worker.sup.forget_turn(self.number);
        }
    }
}

/// The isolated plugins' share of a session's per-session state on the
/// host, kept in the session's slots: the dialects' state as the current
/// turn started (what each worker serving the turn is handed), and what
/// the workers reported since (stored with the session at the turn's end,
/// as an in-process plugin's state is). The state itself stays in the
/// worker, so a plugin reads its own writes; only copies cross.
#[derive(Default)]
pub struct SessionStates {
    inner: Mutex<StatesInner>,
}

#[derive(Default)]
struct StatesInner {
    /// By dialect; `None` until a turn of the session started.
    baseline: Option<Map<String, Value>>,
    /// By dialect: the latest value a worker reported this turn.
    reported: Map<String, Value>,
}

impl SessionStates {
    fn of(slots: &crate::core::hooks::Slots) -> Option<Arc<SessionStates>> {
        slots.slot("isolated-session-state", SessionStates::default)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StatesInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn owns the session and has read what is stored into `slots`:
    /// the dialects' state now is what the turn's workers are handed.
    pub fn turn_begins(slots: &crate::core::hooks::Slots) {
        let Some(states) = SessionStates::of(slots) else {
            return;
        };
        let baseline = crate::dialects::DIALECTS
            .iter()
            .filter_map(|d| {
                Some((
                    d.name().to_string(),
                    (d.abilities().session_state?.export)(slots)?,
                ))
            })
            .collect();
        states.lock().baseline = Some(baseline);
    }

    /// Put what the workers reported into `slots` (each dialect imports
    /// its own), where the session store exports the state from. Done at
    /// the turn's end, not on each report: an in-process plugin of the
    /// same dialect counts the turn's calls in the slots meanwhile, and
    /// a report put in between would have it count a call twice.
    pub fn settle(slots: &crate::core::hooks::Slots) {
        let Some(states) = SessionStates::of(slots) else {
            return;
        };
        let reported = std::mem::take(&mut states.lock().reported);
        for (name, value) in reported {
            if let Some(state) =
                crate::dialects::by_name(&name).and_then(|d| d.abilities().session_state)
            {
                (state.import)(slots, &value);
            }
        }
    }

    /// The state of `dialect` as the turn started (`{}`: none); `None`
    /// before a turn started.
    fn baseline(&self, dialect: &str) -> Option<Value> {
        let inner = self.lock();
        let baseline = inner.baseline.as_ref()?;
        Some(
            baseline
                .get(dialect)
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
        )
    }

    fn report(&self, dialect: &str, value: Value) {
        self.lock().reported.insert(dialect.to_string(), value);
    }
}

/// How a hook's call reaches its worker: in its call's planned batch (the
/// batch itself, when this step is the first), or as a request of its own.
// Made once per hook call and moved into its future: boxing the request
// would add an allocation to every call that is not planned.
#[allow(clippy::large_enum_variant)]
enum Outgoing {
    Planned(Arc<super::batch::Plan>, Option<Box<Request>>),
    Own(Request),
}

/// Where a loop-point hook's report of the session's state goes.
struct StateReport {
    turn: Arc<IsolatedTurn>,
    states: Arc<SessionStates>,
    session: String,
}

impl HookCallback for ProxyHook {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let mut payload = payload;
        // Where edits to the arguments go back to, for tool events; the
        // turn and the chain a loop-point hook's leftovers go back to.
        let mut edits = None;
        let mut turn: Option<Arc<TurnScope>> = None;
        let mut chain = None;
        let mut report: Option<StateReport> = None;
        let request = |payload| {
            Outgoing::Own(Request::Hook {
                index: self.index,
                event: event.name().to_string(),
                payload,
            })
        };
        let outgoing = match &mut payload {
            HookPayload::Tool(ctx) => {
                let (slot, plan) = match ctx.dialect.get_mut::<IsolatedParams>() {
                    Some(state) => (state.params.clone(), state.plan.clone()),
                    None => {
                        // An in-process plugin's hook may hold the call's
                        // state, with its edits: they carry over into ours
                        // (and an in-process hook after this one starts from
                        // ours), so no edit is lost either way round.
                        let slot = Arc::new(Mutex::new(ctx.dialect.edited_params()));
                        ctx.dialect.set(IsolatedParams {
                            params: slot.clone(),
                            plan: None,
                        });
                        (slot, None)
                    }
                };
                // The call as the worker is to see it: built only when
                // sent (a planned step's was sent with its batch).
                let wire = || {
                    let current = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let mut wire = ToolCallWire::of(ctx);
                    if let Some(params) = current {
                        wire.params = params;
                    }
                    wire
                };
                let mut planned = None;
                if let Some(plan) = plan.filter(|p| p.is_of(&self.sup)) {
                    let step = Step::Hook {
                        event: event.name().to_string(),
                        index: self.index,
                    };
                    if let Claim::Planned(first) = plan.claim(&step, wire) {
                        planned = Some(Outgoing::Planned(plan, first));
                    }
                }
                let outgoing = planned.unwrap_or_else(|| request(PayloadWire::Tool(wire())));
                edits = Some(slot);
                outgoing
            }
            HookPayload::Loop(lc) => {
                let mut wire = super::protocol::LoopWire::of(lc);
                if let Some(scope) = &lc.turn {
                    let isolated = IsolatedTurn::of(scope, &self.sup);
                    wire.turn = isolated.as_ref().map(|t| t.number);
                    // A dialect with per-session state: the session's,
                    // once the turn owns it, goes there and back.
                    let states = self
                        .sup
                        .dialect_table()
                        .and_then(|d| d.abilities().session_state)
                        .and(scope.session())
                        .and_then(|slots| SessionStates::of(slots));
                    if let (Some(isolated), Some(states)) = (isolated, states) {
                        wire.session_state = isolated.handover(&self.sup, &states);
                        report = Some(StateReport {
                            turn: isolated,
                            states,
                            session: lc.session_id.clone(),
                        });
                    }
                    turn = Some(scope.clone());
                }
                // The dialect's per-turn state goes there and back.
                if let Some(carried) = self
                    .sup
                    .dialect_table()
                    .and_then(|d| d.abilities().isolated?.carry_out(lc))
                {
                    wire.chain = carried.state;
                    chain = Some(carried.back);
                }
                request(PayloadWire::Loop(Box::new(wire)))
            }
            other => request(PayloadWire::of(other)),
        };
        let sup = self.sup.clone();
        let what = Subject::Hook(event);
        HookReturn::Pending(Box::pin(async move {
            let reply = match outgoing {
                Outgoing::Planned(plan, first) => plan.take(first, what).await,
                Outgoing::Own(request) => sup.request(request, what).await,
            };
            match reply {
                Ok(Reply::Hook {
                    answer,
                    params,
                    after,
                }) => {
                    if let (Some(params), Some(slot)) = (params, edits) {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(params);
                    }
                    if let Some(after) = after {
                        if let (Some(state), Some(chain)) = (after.chain, &chain) {
                            chain(state);
                        }
                        if let (Some(value), Some(report)) = (after.session_state, &report) {
                            report.turn.reported(&sup, &value);
                            report.states.report(sup.dialect(), value);
                        }
                        if let (false, Some(turn)) = (after.ui_events.is_empty(), &turn) {
                            turn.ui_events
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .extend(after.ui_events);
                        }
                    }
                    answer.map(Into::into).map_err(|e| e.into_error(event))
                }
                Ok(other) => Err(HookError::Raised(out_of_protocol(&sup, &other))),
                Err(e) => {
                    if let Some(report) = &report {
                        tracing::warn!(
                            "session '{}': isolated plugin '{}' did not answer its {} hook ({e}); what its worker changed in the session's state since its last answer is not stored",
                            report.session,
                            sup.key(),
                            event.name()
                        );
                    }
                    Err(HookError::Raised(e))
                }
            }
        }))
    }

    fn event_name(&self, _event: HookEvent) -> Option<String> {
        self.event_name.clone()
    }

    /// A guard that fails closed in-process (Hermes's `pre_tool_call`)
    /// fails closed isolated too, its worker's crash or time-out included.
    fn fail_closed(
        &self,
        event: HookEvent,
        error: &HookError,
    ) -> Option<crate::core::hooks::HookAction> {
        self.sup
            .dialect_table()
            .and_then(|d| {
                d.abilities()
                    .isolated?
                    .fail_closed(&self.label, event, error)
            })
            .or_else(|| {
                self.sup
                    .is_guard()
                    .then(|| crate::isolation::guard::refusal(self.sup.key(), event, error))
                    .flatten()
            })
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
