//! The plugin a worker serves: loaded through its dialect, its
//! contributions by the names requests use, the turns and sessions its
//! handlers run in, and the answer to each request (run on the thread that
//! read it; see [`super::worker`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::protocol::{
    event_named, ActionWire, Contribution, LoopAfter, OwnedPayload, PayloadWire, Reply, Request,
};
use crate::core::hooks::{HookAction, HookEntry, HookError, HookPayload, HookReturn, TurnScope};
use crate::core::outcome::PluginError;
use crate::core::registry::{Command, CommandReturn, Registration, Tool, ToolReturn};

/// The plugin's contributions, as the requests name them.
#[derive(Default)]
pub(super) struct Served {
    pub(super) tools: HashMap<String, Tool>,
    pub(super) hooks: Vec<HookEntry>,
    commands: HashMap<String, Command>,
    /// The per-turn state of the turns plughost is running, by its number
    /// (see [`super::protocol::LoopWire`]): the plugin's handlers of one
    /// turn share it (Codumentor's `ctx` dict), until plughost says the
    /// turn ended ([`Request::ForgetTurn`]).
    turns: Mutex<HashMap<u64, Arc<TurnScope>>>,
    /// The per-session state of the sessions those turns ran on, by key,
    /// for the worker's life (the plugin's own process).
    sessions: Mutex<HashMap<String, Arc<WorkerSession>>>,
    /// The host home the plugin was loaded for (where its runtime tools are).
    home: std::path::PathBuf,
    /// Tools it registered while running, once plughost asked for them.
    runtime: Mutex<HashMap<String, Tool>>,
    /// Its dialect (what carries its per-turn state, finds runtime tools).
    dialect: Option<&'static dyn crate::dialects::Dialect>,
    // --- iso-parity (issue 47) ---
    /// What the dialect holds while the plugin is loaded (Hermes's
    /// teardown: `on_unload` callbacks, spawned tasks), dropped at
    /// when the stream ends (plughost is done with it).
    hold: Mutex<Option<Box<dyn Send + Sync>>>,
    /// Its messaging platforms, whose adapters run here.
    platforms: super::worker_platforms::Platforms,
    /// Its HTTP routes, served here (issue 47 item 3).
    routes: super::worker_routes::Routes,
    /// Its scheduled tasks, auth modes and sinks, run here.
    parts: super::worker_parts::Parts,
}

/// Run the plugin's teardown now (once): plughost is done with it.
/// Every serving thread sees the stream end: the first runs it, the
/// others wait on the lock until it has run (then the process may end).
pub(super) fn unload(served: &Served) {
    let mut hold = served.hold.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(taken) = hold.take() {
        // Its Python objects go with the GIL held.
        let _ = crate::runtime::try_attach(|_| drop(taken));
    }
}

impl Served {
    /// A tool registered while running, as plughost last learnt it; `None`
    /// for one it registered when it loaded (no copy on that hot path).
    pub(super) fn runtime_tool(&self, name: &str) -> Option<Tool> {
        if self.tools.contains_key(name) {
            return None;
        }
        let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner());
        runtime.get(name).cloned()
    }

    fn turn(&self, number: u64, session: &WorkerSession) -> Arc<TurnScope> {
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        let turn = turns.entry(number).or_default().clone();
        turn.attach_session(session.slots.clone());
        turn
    }

    fn session(&self, key: &str) -> Arc<WorkerSession> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.entry(key.to_string()).or_default().clone()
    }

    /// How its dialect's per-session state leaves and enters the slots.
    fn session_state(&self) -> Option<crate::dialects::SessionState> {
        self.dialect.and_then(|d| d.abilities().session_state)
    }
}

/// One session as the worker keeps it: its slots (the dialect's
/// per-session state, Codumentor's usage totals), and that state as it
/// last crossed the stream.
#[derive(Default)]
struct WorkerSession {
    slots: Arc<crate::core::hooks::Slots>,
    /// `None` until plughost handed the session's state to this process
    /// ([`LoopWire::session_state`](super::protocol::LoopWire::session_state));
    /// then the value last handed or reported (`{}` for none).
    crossed: Mutex<Option<serde_json::Value>>,
}

impl WorkerSession {
    /// The session's state becomes `value` (what plughost has stored).
    fn hand_over(&self, state: Option<crate::dialects::SessionState>, value: serde_json::Value) {
        let mut crossed = self.crossed.lock().unwrap_or_else(|e| e.into_inner());
        let now = match state {
            Some(state) => {
                (state.import)(&self.slots, &value);
                exported(state, &self.slots)
            }
            None => value,
        };
        *crossed = Some(now);
    }

    /// The state, when it changed since it last crossed (and it was handed
    /// to this process: a state counted from nothing is never reported).
    fn changed(&self, state: Option<crate::dialects::SessionState>) -> Option<serde_json::Value> {
        let state = state?;
        let mut crossed = self.crossed.lock().unwrap_or_else(|e| e.into_inner());
        let last = crossed.as_ref()?;
        let now = exported(state, &self.slots);
        if &now == last {
            return None;
        }
        *crossed = Some(now.clone());
        Some(now)
    }
}

/// The dialect's state in `slots`, `{}` for none (what clears it again).
fn exported(
    state: crate::dialects::SessionState,
    slots: &crate::core::hooks::Slots,
) -> serde_json::Value {
    (state.export)(slots).unwrap_or_else(|| serde_json::Value::Object(Default::default()))
}

/// Load the plugin; what it contributes, as served and as announced.
pub(super) fn load(
    key: &str,
    dir: &std::path::Path,
    home: &std::path::Path,
    dialect: &str,
    python_log_level: u8,
    channel: Option<Arc<super::host_link::worker_side::Channel>>,
) -> (Option<Served>, Reply) {
    let fail = |error: PluginError| (None, Reply::LoadFailed { error });
    let settings = crate::runtime::Settings::default().python_log_level(python_log_level);
    let started = crate::runtime::Runtime::start(settings).map_err(|e| e.to_string());
    if let Err(e) = started.and_then(|rt| rt.interpreter().map_err(|e| e.to_string())) {
        return fail(PluginError::native(e.to_string()));
    }
    let Some(dialect) = crate::dialects::by_name(dialect) else {
        return fail(PluginError::native(format!(
            "no dialect '{dialect}' in this build"
        )));
    };
    // Its context members that call back into the host go over the channel.
    if let Some(channel) = channel {
        crate::dialects::host_calls::set_for_process(channel);
    }
    // Without a host (a bundle's hooks keep their no-host path); what the
    // dialect recorded for it (its platforms) is in the hostless state.
    let web_before = crate::dialects::web_providers::provider_names();
    let loaded = match dialect.load(key, dir, home) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let state = crate::dialects::hostless_state();
    let (platforms, snapshots) = super::worker_platforms::Platforms::of(state, key);
    // The package stays imported for the worker's whole life.
    std::mem::forget(loaded.package);
    let mut served = Served {
        home: home.to_path_buf(),
        dialect: Some(dialect),
        hold: Mutex::new(loaded.hold),
        platforms,
        ..Default::default()
    };
    let mut contributions: Vec<Contribution> = snapshots
        .into_iter()
        .map(|platform| Contribution::Platform { platform })
        .collect();
    for r in loaded.registrations {
        match r {
            Registration::Tool(t) => {
                contributions.push(Contribution::Tool {
                    name: t.spec.name.clone(),
                    description: t.spec.description.clone(),
                    parameters: t.spec.parameters.clone(),
                    terminal: t.terminal,
                    toolset: t.spec.toolset.clone(),
                    requires_env: t.spec.requires_env.clone(),
                    shadows_only_own_toolset: t.shadows_only_own_toolset,
                    own_renderer: t.renderer.is_some(),
                });
                served.tools.insert(t.spec.name.clone(), t);
            }
            Registration::Hook { event, name, entry } => {
                contributions.push(Contribution::Hook {
                    event: event.map(|e| e.name().to_string()),
                    event_name: event.and_then(|e| entry.callback.event_name(e)),
                    name,
                    label: entry.label.clone(),
                    priority: entry.priority,
                    index: served.hooks.len(),
                });
                served.hooks.push(entry);
            }
            Registration::Command(c) => {
                contributions.push(Contribution::Command {
                    name: c.name.clone(),
                    description: c.description.clone(),
                    args_hint: c.args_hint.clone(),
                });
                served.commands.insert(c.name.clone(), c);
            }
            Registration::Skill(s) => contributions.push(Contribution::Skill {
                name: s.name,
                description: s.description,
                path: s.path,
            }),
            Registration::Routes(r) => {
                contributions.push(Contribution::Routes {
                    self_authenticating: r.self_authenticating.clone(),
                    body_limit: r.body_limit,
                    rate_limited: r.rate_limit_key.is_some(),
                });
                served.routes.add(r);
            }
            Registration::Task(t) => contributions.push(served.parts.add_task(t)),
            Registration::Authenticator(a) => contributions.push(served.parts.add_auth(a)),
            Registration::Observer(o) => contributions.push(served.parts.add_sink(o)),
            Registration::ModelProvider(profile) => {
                contributions.push(served.parts.add_model(profile))
            }
        }
    }
    let (providers, not_used) = (
        crate::dialects::providers(state, key),
        crate::dialects::not_used(state, key),
    );
    if !providers.is_empty() || !not_used.is_empty() {
        contributions.push(Contribution::Report {
            providers,
            not_used,
        });
    }
    contributions.extend(
        crate::dialects::web_providers::announced_since(&web_before)
            .into_iter()
            .map(|provider| Contribution::WebProvider { provider }),
    );
    (Some(served), load_answer(contributions))
}

/// The answer to a load that worked, with the version this worker runs.
fn load_answer(contributions: Vec<Contribution>) -> Reply {
    let version = Some(env!("CARGO_PKG_VERSION").to_string());
    Reply::Loaded {
        contributions,
        version,
    }
}

fn refused(problem: String) -> Reply {
    Reply::Refused { problem }
}

/// A reply now, or (for an async handler) when its future completes.
pub(super) enum Answer {
    Now(Reply),
    /// Nothing to send ([`Request::ForgetTurn`]).
    Silent,
    Later(BoxFuture<Reply>),
    /// A [`Request::Batch`]: run where it was read, each step answered.
    Batch {
        tool: String,
        call: super::protocol::ToolCallWire,
        steps: Vec<super::protocol::Step>,
    },
    /// Answered in several replies (a route's answer): called on the
    /// serving thread with the request's id and where its replies go; the
    /// future it gives runs on the runtime, cancelled with the request.
    Streamed(Box<dyn FnOnce(u64, super::worker_routes::Replies) -> BoxFuture<()> + Send>),
}

pub(super) type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Serve one request on the calling thread: a sync handler runs here and
/// its reply is ready; an async one gives a future to await.
pub(super) fn answer(served: &Served, request: Request) -> Answer {
    match request {
        Request::Load { .. } => Answer::Now(refused("the plugin is already loaded".into())),
        Request::Check { tool } => {
            let runtime = served.runtime_tool(&tool);
            match served.tools.get(&tool).or(runtime.as_ref()) {
                Some(t) => Answer::Now(Reply::Checked {
                    result: t.handler.check(),
                }),
                None => Answer::Now(refused(format!("no tool '{tool}' in this worker"))),
            }
        }
        Request::Tool { tool, call } => answer_tool(served, tool, call),
        Request::Hook {
            index,
            event,
            payload,
        } => answer_hook(served, index, &event, payload),
        Request::Around {
            index,
            event,
            frame,
            call,
            payload,
        } => match served.hooks.get(index) {
            Some(entry) => Answer::Now(super::around::answer(
                entry,
                &event,
                frame,
                call,
                payload,
                super::host_link::worker_side::channel(),
            )),
            None => Answer::Now(refused(format!("no hook number {index} in this worker"))),
        },
        Request::Command { name, args } => {
            let Some(c) = served.commands.get(&name) else {
                return Answer::Now(refused(format!("no command '/{name}' in this worker")));
            };
            match c.handler.call(&args) {
                CommandReturn::Ready(result) => Answer::Now(Reply::Command { result }),
                CommandReturn::Pending(fut) => {
                    Answer::Later(Box::pin(
                        async move { Reply::Command { result: fut.await } },
                    ))
                }
            }
        }
        Request::RuntimeTool { name } => answer_runtime_tool(served, name),
        Request::WebProvider {
            name,
            method,
            args,
            kwargs,
        } => {
            let call =
                crate::dialects::web_providers::call_in_worker(&name, &method, &args, &kwargs);
            Answer::Later(Box::pin(async move {
                Reply::WebProvider { result: call.await }
            }))
        }
        Request::ForgetTurn { turn } => {
            forget_turn(served, turn);
            Answer::Silent
        }
        Request::Batch { tool, call, steps } => Answer::Batch { tool, call, steps },
        // Served by the worker's loop before it comes here (iso-runtime).
        Request::Cancel { .. } => Answer::Now(refused("a cancel is not a call".into())),
        // --- iso-parity ---
        Request::HostAnswer { call, result } => {
            super::host_link::worker_side::answered(call, result);
            Answer::Silent
        }
        Request::Platform { platform, op } => served.platforms.answer(platform, op),
        Request::Event {
            event,
            index,
            payload,
        } => {
            if let Some(d) = served.dialect {
                crate::dialects::host_calls::deliver_here(d.name(), &event, index, payload);
            }
            Answer::Now(Reply::Delivered)
        }
        Request::Mount { round } => served.routes.mount(round),
        Request::Lifespan { round, start } => served.routes.lifespan(round, start),
        Request::Http { round, head } => {
            let routes = served.routes.clone();
            Answer::Streamed(Box::new(move |id, send| routes.http(id, round, head, send)))
        }
        Request::HttpBody { call, piece } => served.routes.body(call, piece),
        Request::HttpCredit { call, chunks } => served.routes.credit(call, chunks),
        Request::RateKey { head } => served.routes.rate_key(head),
        Request::RunTask { name } => served.parts.run_task(&name),
        Request::Authenticate { mode, head } => served.parts.authenticate(&mode, head),
        Request::Observe { index, call } => served.parts.observe(index, call),
        Request::ModelChat {
            name,
            model,
            request,
        } => served.parts.model_chat(&name, model, request),
    }
}

/// Run tool `tool` with the call's context; a failure goes back with the
/// handler's own verdict on whether it is fatal.
fn answer_tool(served: &Served, tool: String, call: super::protocol::ToolCallWire) -> Answer {
    let runtime = served.runtime_tool(&tool);
    let Some(t) = served.tools.get(&tool).or(runtime.as_ref()) else {
        return Answer::Now(refused(format!("no tool '{tool}' in this worker")));
    };
    let mut ctx = call.into_context(None);
    // A failure is sent with the handler's own verdict on it.
    let handler = t.handler.clone();
    let reply = move |result: Result<String, PluginError>| match result {
        Err(error) => Reply::ToolFailed {
            fatal: handler.fatal(&error),
            error,
        },
        ok => Reply::Tool { result: ok },
    };
    match t.handler.call(&mut ctx) {
        ToolReturn::Ready(result) => Answer::Now(reply(result)),
        ToolReturn::Pending(fut) => Answer::Later(Box::pin(async move {
            let result = fut.await;
            drop(ctx);
            reply(result)
        })),
    }
}

/// Run hook number `index` for `event`, its loop-point context rebuilt
/// with the worker's per-turn state and the dialect's carried value.
fn answer_hook(served: &Served, index: usize, event: &str, payload: PayloadWire) -> Answer {
    let Some(entry) = served.hooks.get(index) else {
        return Answer::Now(refused(format!("no hook number {index} in this worker")));
    };
    let Some(event) = event_named(event) else {
        return Answer::Now(refused(format!("no event '{event}'")));
    };
    // The session of a loop point's turn, whose state may cross back.
    let mut session = None;
    let mut owned = match payload {
        PayloadWire::Loop(mut wire) => {
            let (turn, chain) = (wire.turn.take(), wire.chain.take());
            let handed = wire.session_state.take();
            let mut lc = wire.into_context(Some(event));
            if let Some(number) = turn {
                let s = served.session(&lc.session_id);
                if let Some(value) = handed {
                    s.hand_over(served.session_state(), value);
                }
                lc.turn = Some(served.turn(number, &s));
                session = Some(s);
            }
            if let (Some(chain), Some(dialect)) = (chain, served.dialect) {
                if let Some(isolated) = dialect.abilities().isolated {
                    isolated.carry_in(&mut lc, chain);
                }
            }
            OwnedPayload::Loop(Box::new(lc))
        }
        other => OwnedPayload::from_wire(other, event),
    };
    let dialect = served.dialect;
    // What the hook changes in a loop point's context goes back as an edit.
    let before = match &owned {
        OwnedPayload::Loop(lc) => Some(super::loop_edits::Snapshot::of(lc)),
        _ => None,
    };
    match entry.callback.call(event, owned.as_payload()) {
        HookReturn::Ready(answer) => {
            Answer::Now(hook_reply(answer, &mut owned, (dialect, session, before)))
        }
        HookReturn::Pending(fut) => Answer::Later(Box::pin(async move {
            let answer = fut.await;
            hook_reply(answer, &mut owned, (dialect, session, before))
        })),
    }
}

/// Describe (and remember, or forget) tool `name` as the dialect found it
/// registered at run time.
fn answer_runtime_tool(served: &Served, name: String) -> Answer {
    let found = served.dialect.and_then(|d| {
        d.abilities()
            .running_tools?
            .runtime_tool(&served.home, &name)
    });
    let wire = found.as_ref().map(|t| super::protocol::RuntimeToolWire {
        description: t.spec.description.clone(),
        parameters: t.spec.parameters.clone(),
        plugin: t.spec.plugin.clone(),
    });
    let mut runtime = served.runtime.lock().unwrap_or_else(|e| e.into_inner());
    match found {
        Some(t) => runtime.insert(name, t),
        None => runtime.remove(&name),
    };
    Answer::Now(Reply::RuntimeTool { found: wire })
}

/// Drop what the worker kept for turn `turn`.
fn forget_turn(served: &Served, turn: u64) {
    let gone = served
        .turns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&turn);
    // Its Python objects (the `ctx` dict) go with the GIL held.
    if let Some(scope) = gone {
        let _ = crate::runtime::try_attach(|_| drop(scope));
    }
}

/// The arguments a tool event's hook left, for its reply: `None` when they
/// are as plughost last knew them (most hooks only read them), which spares
/// encoding and decoding the whole map at every step. What is sent becomes
/// what plughost knows, so a later hook that puts them back is sent too.
pub(super) fn params_edit(
    ctx: &mut crate::core::hooks::ToolCallContext,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let edited = ctx.dialect.edited_params()?;
    if edited == ctx.params {
        return None;
    }
    ctx.params = edited.clone();
    Some(edited)
}

/// A hook's reply: its answer, and the arguments if it changed them (a loop
/// point's: the dialect's state of the turn and, when it changed, of the
/// session).
fn hook_reply(
    mut answer: Result<HookAction, HookError>,
    owned: &mut OwnedPayload,
    (dialect, session, before): (
        Option<&'static dyn crate::dialects::Dialect>,
        Option<Arc<WorkerSession>>,
        Option<super::loop_edits::Snapshot>,
    ),
) -> Reply {
    if let (OwnedPayload::Loop(lc), Some(before)) = (&*owned, before) {
        answer = before.answer(lc, answer);
    }
    let (params, after) = match owned.as_payload() {
        // The context ends with this reply: the edit is sent, not kept.
        HookPayload::Tool(ctx) => (
            ctx.dialect.edited_params().filter(|e| *e != ctx.params),
            None,
        ),
        HookPayload::Loop(lc) => {
            let ui_events = lc.turn.as_ref().map_or_else(Vec::new, |scope| {
                std::mem::take(&mut *scope.ui_events.lock().unwrap_or_else(|e| e.into_inner()))
            });
            let state = dialect.and_then(|d| d.abilities().session_state);
            let after = LoopAfter {
                chain: dialect.and_then(|d| d.abilities().isolated?.carry_left(lc)),
                ui_events,
                session_state: session.and_then(|s| s.changed(state)),
            };
            (None, Some(Box::new(after)))
        }
        _ => (None, None),
    };
    Reply::Hook {
        answer: answer.map(ActionWire::from).map_err(Into::into),
        params,
        after,
    }
}
