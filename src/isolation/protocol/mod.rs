//! The typed messages between plughost and a plugin's worker process, and
//! their framing: a 4-byte big-endian length, then that many bytes of JSON.
//!
//! Only this module knows the wire shape; the core types (contexts,
//! actions, errors) are mirrored here so they stay free of `Deserialize`
//! obligations and the protocol can evolve on its own.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::hooks::{HookAction, HookError};
use crate::core::outcome::{PluginError, ResourceLimit};
use crate::plugins::config::ResourceLimits;

mod frame;
pub mod http;
pub mod parts;
mod payload;

pub use frame::{encode_frame, read_frame, read_frame_with, take_frame, write_frame};
pub use payload::{
    event_named, InboundWire, LoopAfter, LoopWire, OwnedPayload, PayloadWire, ToolCallWire,
};

/// The largest frame either side accepts (a corrupt length must not make
/// the reader allocate gigabytes).
pub const MAX_FRAME: usize = 256 << 20;

/// A request with the id its reply carries.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub id: u64,
    pub body: T,
}

/// What plughost asks of a worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// Load the plugin (always the first request, exactly once).
    Load {
        key: String,
        dir: PathBuf,
        home: PathBuf,
        dialect: String,
        python_log_level: u8,
        /// The OS limits the worker puts on itself before loading.
        #[serde(default)]
        limits: ResourceLimits,
        /// Its sandbox's rules, for the worker to name the rule that
        /// denied an access (issue 50); `None`: unconfined.
        #[serde(default)]
        sandbox: Option<crate::isolation::sandbox::denials::Watch>,
    },
    /// Run a tool's `check_fn`.
    Check { tool: String },
    /// Run a tool with the call's context.
    Tool { tool: String, call: ToolCallWire },
    /// Run hook callback number `index` (in contribution order) for `event`.
    Hook {
        index: usize,
        event: String,
        payload: PayloadWire,
    },
    /// Run hook callback number `index`, an execution middleware of lane
    /// `event`, around the rest of its chain, which stays in plughost:
    /// its `next` is [`crate::dialects::host_calls::HostCall::ChainNext`]
    /// naming `frame` (see [`crate::isolation::around`]).
    Around {
        index: usize,
        event: String,
        frame: u64,
        call: crate::isolation::around::ExecCallWire,
        payload: Value,
    },
    /// Run `method` of the plugin's web provider `name` (`args`: a JSON
    /// list, `kwargs`: an object); answered with [`Reply::WebProvider`].
    WebProvider {
        name: String,
        method: String,
        args: Value,
        kwargs: Value,
    },
    /// Run a slash command.
    Command { name: String, args: String },
    /// Turn number `turn` ended: drop the per-turn state kept for it.
    /// Not answered (id 0).
    ForgetTurn { turn: u64 },
    /// Describe tool `name` if the plugin registered it while running
    /// (Codumentor's `agent.tool_registry.register_tool`).
    RuntimeTool { name: String },
    /// One tool call with the plugin's own hooks on it, in one round trip
    /// (see [`crate::isolation::batch`]): run `steps` in order on one
    /// context made from `call`, answering each with a [`Reply::Step`] as
    /// soon as it is done; the worker stops early (its last step says so)
    /// where plughost might not go on the way the worker would.
    Batch {
        tool: String,
        call: ToolCallWire,
        steps: Vec<Step>,
    },
    // --- iso-runtime ---
    /// Stop request `call` (issue 47 item 2): plughost no longer waits for
    /// it (its time limit passed, or its caller went away). An async
    /// handler's task is cancelled; a sync handler's thread is left to
    /// finish and its answer dropped. Answered with [`Reply::Cancelled`]
    /// once the worker's interpreter has taken the request in: a worker
    /// that does not answer within plughost's bound is wedged, and
    /// replaced.
    Cancel { call: u64 },
    // --- iso-parity ---
    /// The host's answer to the worker's [`Reply::HostCall`] number `call`.
    /// Not answered (id 0).
    HostAnswer {
        call: u64,
        result: Result<Value, String>,
    },
    /// The gateway's call `op` on the plugin's platform `platform`, whose
    /// adapter runs here (issue 49 item 5); answered with [`Reply::Port`].
    Platform {
        platform: String,
        op: crate::dialects::platforms::PortOp,
    },
    /// Run the plugin's subscriber number `index` of `event` (the host's
    /// bus delivers it, whoever emitted it); answered with
    /// [`Reply::Delivered`] once it ran.
    Event {
        event: String,
        index: usize,
        payload: Value,
    },
    // --- routes in the worker (issue 47 item 3) ---
    /// Mount the plugin's routes on mount `round`'s application (a fresh
    /// one per round, as in-process); answered with [`Reply::Done`].
    Mount { round: u64 },
    /// Start (`start`) or shut down the lifespan of round `round`'s
    /// application; answered with [`Reply::Done`].
    Lifespan { round: u64, start: bool },
    /// One request for round `round`'s application, answered in several
    /// replies (each a [`Reply::Step`]): [`Reply::HttpStart`], then
    /// [`Reply::HttpChunk`]s, then [`Reply::HttpEnd`] (the last), or
    /// [`Reply::HttpFailed`] at any point. A streamed body follows in
    /// [`Request::HttpBody`] requests naming this one.
    Http { round: u64, head: http::HttpHead },
    /// The next piece of request `call`'s streamed body; answered with
    /// [`Reply::Delivered`] once the application's queue took it (the host
    /// sends the next only then: the upload's backpressure).
    HttpBody { call: u64, piece: http::BodyPiece },
    /// The client took `chunks` more chunks of request `call`'s answer:
    /// the worker may send that many more. Not answered (id 0).
    HttpCredit { call: u64, chunks: u32 },
    /// The rate-limit bucket of a request (Felix's `rate_limit_key`), for
    /// the head alone (no body); answered with [`Reply::RateKey`].
    RateKey { head: http::HttpHead },
    /// Run the plugin's scheduled task `name` once; answered with
    /// [`Reply::Done`].
    RunTask { name: String },
    /// Judge a request (its head) with auth mode `mode`; answered with
    /// [`Reply::Auth`].
    Authenticate { mode: String, head: http::HttpHead },
    /// Tell the plugin's sink number `index` of a call; answered with
    /// [`Reply::Delivered`] once it was told (as in-process, the caller
    /// goes on after the sink saw it).
    Observe {
        index: usize,
        call: parts::ObservedWire,
    },
    /// One chat call of model `model` of the plugin's model provider
    /// `name` (its code runs here); answered with [`Reply::ModelChat`].
    ModelChat {
        name: String,
        model: String,
        request: Value,
    },
}

/// One step of a [`Request::Batch`], in the pipeline's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// Hook number `index` for `event` (a tool event).
    Hook { event: String, index: usize },
    /// The tool itself.
    Tool,
}

/// What a worker answers.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Loaded {
        contributions: Vec<Contribution>,
        /// The plughost version the worker runs: a worker on another
        /// CPython runs the wheel its environment was built with, which an
        /// upgrade of plughost leaves behind. `None` from a worker older
        /// than this field.
        #[serde(default)]
        version: Option<String>,
    },
    LoadFailed {
        error: PluginError,
    },
    /// `None`: the tool has no `check_fn` (and never will).
    Checked {
        result: Option<Result<bool, PluginError>>,
    },
    Tool {
        result: Result<String, PluginError>,
    },
    Hook {
        answer: Result<ActionWire, HookErrorWire>,
        /// The call's arguments as the hook left them, when they differ
        /// from what plughost last knew of them (tool events only).
        params: Option<Map<String, Value>>,
        /// What a loop-point hook left besides its answer.
        #[serde(default)]
        after: Option<Box<LoopAfter>>,
    },
    /// [`Request::WebProvider`]: the method's answer, or why it failed.
    WebProvider {
        result: Result<Value, PluginError>,
    },
    /// [`Request::Around`]: what the middleware's chain came to.
    Around {
        result: Result<Value, crate::core::callbacks::ExecError>,
    },
    /// A tool failed; whether its handler counts that failure as fatal
    /// (Felix's `fatal=True` tool raising ends the turn after its batch).
    ToolFailed {
        error: PluginError,
        fatal: bool,
    },
    /// [`Request::RuntimeTool`]: the tool, if the plugin registered one so named.
    RuntimeTool {
        found: Option<RuntimeToolWire>,
    },
    Command {
        result: Result<Option<String>, PluginError>,
    },
    /// A request the worker could not serve (unknown tool, bad event).
    Refused {
        problem: String,
    },
    /// Sent (with id 0) just before the worker ends itself because it went
    /// past `limit`: its calls in flight fail naming the limit.
    Exceeded {
        limit: ResourceLimit,
    },
    /// The answer to one step of a [`Request::Batch`] (a [`Reply::Hook`],
    /// [`Reply::Tool`] or [`Reply::ToolFailed`]); `last`: the worker runs
    /// no further step of it.
    Step {
        reply: Box<Reply>,
        last: bool,
    },
    // --- iso-runtime ---
    /// The answer to [`Request::Cancel`]; `running`: the call was still
    /// running (or not yet started) and is now cancelled.
    Cancelled {
        running: bool,
    },
    // --- iso-parity ---
    /// The worker's plugin calls its host (a context member, issue 47):
    /// sent with id 0 at any time; the host answers with
    /// [`Request::HostAnswer`] naming `call`.
    HostCall {
        call: u64,
        body: crate::dialects::host_calls::HostCall,
    },
    /// [`Request::Event`] ran.
    Delivered,
    /// The answer to [`Request::Platform`]: a sent message's id (or
    /// `null`), or why the adapter could not.
    Port {
        result: Result<Value, crate::dialects::platforms::PortError>,
    },
    // --- routes in the worker (issue 47 item 3) ---
    /// [`Request::Mount`] or [`Request::Lifespan`] done, or why not.
    Done {
        result: Result<(), PluginError>,
    },
    /// The start of a route's answer.
    HttpStart {
        status: u16,
        headers: Vec<(http::Bytes, http::Bytes)>,
    },
    /// A chunk of its body.
    HttpChunk {
        data: http::Bytes,
    },
    /// Its body ended.
    HttpEnd,
    /// The application failed (before its answer started, or in its body).
    HttpFailed {
        error: PluginError,
    },
    /// [`Request::RateKey`]'s bucket, `None` for the next plugin's.
    RateKey {
        result: Result<Option<String>, PluginError>,
    },
    /// [`Request::Authenticate`]'s judgement.
    Auth {
        result: Result<parts::AuthWire, PluginError>,
    },
    /// [`Request::ModelChat`]'s answer, or why the call failed.
    ModelChat {
        result: Result<Value, String>,
    },
}

/// A tool a plugin registered while running, as plughost lists it.
#[derive(Debug, Serialize, Deserialize)]
pub struct RuntimeToolWire {
    pub description: String,
    pub parameters: Value,
    /// The key of the plugin that registered it.
    pub plugin: String,
}

/// One contribution of the loaded plugin, in registration order.
#[derive(Debug, Serialize, Deserialize)]
pub enum Contribution {
    Tool {
        name: String,
        description: String,
        parameters: Value,
        terminal: bool,
        /// The tool's toolset and required variables, as listed.
        #[serde(default)]
        toolset: String,
        #[serde(default)]
        requires_env: Vec<String>,
        /// Hermes's collision rule (a tool registered without `override`).
        #[serde(default)]
        shadows_only_own_toolset: bool,
        /// The tool renders its outcomes in its dialect's own strings
        /// (Hermes's JSON errors), not the standard ones.
        #[serde(default)]
        own_renderer: bool,
    },
    Hook {
        /// `None` for a name no event matches (accepted, never fired).
        event: Option<String>,
        name: String,
        /// The dialect's own name of the event (`before_tool`), as
        /// `hook_errors` reports it.
        #[serde(default)]
        event_name: Option<String>,
        label: String,
        priority: i32,
        /// The index [`Request::Hook`] names it by.
        index: usize,
    },
    Command {
        name: String,
        description: String,
        args_hint: String,
    },
    Skill {
        name: String,
        description: String,
        path: PathBuf,
    },
    /// A messaging platform whose adapter runs in the worker: the host's
    /// gateway drives it with [`Request::Platform`].
    Platform {
        platform: crate::dialects::platforms::PlatformSnapshot,
    },
    /// A model provider: data (an endpoint, headers, key variables) the
    /// host calls itself.
    ModelProvider {
        profile: crate::core::model_profiles::ModelProfile,
    },
    /// What the plugin's dialect says of it in `plugins doctor`, as the
    /// worker recorded it while the plugin loaded (its providers and
    /// members, what it registered that is not used): shown by the host's
    /// doctor ([`crate::isolation::WorkerReports`]).
    Report {
        providers: Vec<String>,
        not_used: Vec<String>,
    },
    /// A web search/extract provider the plugin registered: plughost
    /// registers a stand-in whose methods run here
    /// ([`Request::WebProvider`]).
    WebProvider {
        provider: crate::dialects::web_providers::WebProviderWire,
    },
    /// The plugin's HTTP routes, served by the worker: the host mounts
    /// them with [`Request::Mount`] and forwards requests with
    /// [`Request::Http`].
    Routes {
        self_authenticating: Vec<String>,
        body_limit: Option<u64>,
        /// It names rate-limit buckets ([`Request::RateKey`]).
        rate_limited: bool,
    },
    /// A scheduled task, run with [`Request::RunTask`].
    Task {
        name: String,
        every: std::time::Duration,
    },
    /// An auth mode, judged with [`Request::Authenticate`].
    AuthMode { mode: String },
    /// An audit/usage sink, told with [`Request::Observe`].
    Sink { owner: String, index: usize },
}

/// [`HookAction`] on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub enum ActionWire {
    Continue,
    Block(String),
    Skip(String),
    Rewrite(String),
    Replace(String),
    Inject(String),
    Decide(crate::core::hooks::LoopDecision),
}

impl From<HookAction> for ActionWire {
    fn from(a: HookAction) -> ActionWire {
        match a {
            HookAction::Continue => ActionWire::Continue,
            HookAction::Block(s) => ActionWire::Block(s),
            HookAction::Skip(s) => ActionWire::Skip(s),
            HookAction::Rewrite(s) => ActionWire::Rewrite(s),
            HookAction::Replace(s) => ActionWire::Replace(s),
            HookAction::Inject(s) => ActionWire::Inject(s),
            HookAction::Decide(d) => ActionWire::Decide(d),
        }
    }
}

impl From<ActionWire> for HookAction {
    fn from(a: ActionWire) -> HookAction {
        match a {
            ActionWire::Continue => HookAction::Continue,
            ActionWire::Block(s) => HookAction::Block(s),
            ActionWire::Skip(s) => HookAction::Skip(s),
            ActionWire::Rewrite(s) => HookAction::Rewrite(s),
            ActionWire::Replace(s) => HookAction::Replace(s),
            ActionWire::Inject(s) => HookAction::Inject(s),
            ActionWire::Decide(d) => HookAction::Decide(d),
        }
    }
}

/// [`HookError`] on the wire. plughost bounds a worker's call itself; a
/// callback's own bound (a Claude Code command hook's `timeout`) is the
/// worker's, and crosses as what it is, so it reads as it does in-process.
#[derive(Debug, Serialize, Deserialize)]
pub enum HookErrorWire {
    Raised(PluginError),
    WrongShape(String, String),
    NotRun(String),
    TimedOut(std::time::Duration),
    Overran(std::time::Duration),
}

impl From<HookError> for HookErrorWire {
    fn from(e: HookError) -> HookErrorWire {
        match e {
            HookError::Raised(p) => HookErrorWire::Raised(p),
            HookError::WrongShape(shape, event) => HookErrorWire::WrongShape(shape, event),
            HookError::TimedOut(limit) => HookErrorWire::TimedOut(limit),
            HookError::Overran(limit) => HookErrorWire::Overran(limit),
            HookError::NotRun(m) => HookErrorWire::NotRun(m),
        }
    }
}

impl From<HookErrorWire> for HookError {
    fn from(wire: HookErrorWire) -> HookError {
        match wire {
            HookErrorWire::Raised(p) => HookError::Raised(p),
            HookErrorWire::WrongShape(shape, event) => HookError::WrongShape(shape, event),
            HookErrorWire::NotRun(m) => HookError::NotRun(m),
            HookErrorWire::TimedOut(limit) => HookError::TimedOut(limit),
            HookErrorWire::Overran(limit) => HookError::Overran(limit),
        }
    }
}
