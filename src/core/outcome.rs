//! Typed results of the tool pipeline.
//!
//! The core decides on these, never on result text: how a call ended is a
//! [`ToolOutcome`], a plugin failure is a [`PluginError`] that keeps its
//! exception type and traceback, and each dialect renders the strings its
//! plugins and users expect ([`Renderer`]) at its edge.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A failure raised by plugin (or native) code, kept typed until rendered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PluginError {
    /// The exception type (`ZeroDivisionError`); empty for native errors.
    #[serde(rename = "type")]
    pub kind: String,
    /// The exception's message (`str(exc)`).
    pub message: String,
    /// The formatted Python traceback, formatted once where it was caught.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// `file:line` of the innermost frame of plugin code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// A `BaseException` that is not an `Exception` (`SystemExit`,
    /// `KeyboardInterrupt`): contained by plughost, shown with its type.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub base_exception: bool,
    /// Set when the failure is not the plugin's code raising but its
    /// isolated worker process failing (the isolation layer reports it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<Box<PluginFault>>,
}

/// How an isolated plugin's worker process failed a call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum PluginFault {
    /// The worker died (a signal, an exit) with the call in flight.
    Crashed { plugin: String, cause: ExitCause },
    /// plughost stopped the worker (a call past its time limit) with the
    /// call in flight.
    Stopped { plugin: String, reason: String },
    /// The worker did not answer within `after_ms` (a spinning
    /// `register()` or `check_fn`); it was killed.
    TimedOut { plugin: String, after_ms: u64 },
    /// The worker crashed too often; the plugin is off for the rest of
    /// the process.
    Disabled {
        plugin: String,
        crashes: u32,
        window_seconds: u64,
    },
    /// The worker could not be started or spoke out of protocol.
    Unavailable { plugin: String, problem: String },
    /// The worker went past one of its resource limits (`plugins.limits`):
    /// the OS stopped it, or its memory cap made an allocation fail.
    LimitExceeded {
        plugin: String,
        limit: ResourceLimit,
    },
    /// The worker did not acknowledge a call's cancel within `after_ms`
    /// (its interpreter is held, e.g. a C call that never returns): it was
    /// replaced, with the calls it had in flight (issue 47).
    Wedged { plugin: String, after_ms: u64 },
}

/// An OS resource limit of an isolated plugin's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum ResourceLimit {
    /// Its heap (data segment) may not grow past `mib` MiB.
    Memory { mib: u64 },
    /// One call may use `seconds` of CPU time.
    CpuTime { seconds: u64 },
}

impl std::fmt::Display for ResourceLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResourceLimit::Memory { mib } => write!(f, "memory limit ({mib} MiB)"),
            ResourceLimit::CpuTime { seconds } => write!(f, "CPU time limit ({seconds} s)"),
        }
    }
}

/// How a worker process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum ExitCause {
    /// Killed by a signal (`SIGSEGV`).
    Signal { number: i32, name: String },
    /// Exited with a status (`os._exit(3)`).
    Exit { code: i32 },
}

impl std::fmt::Display for ExitCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitCause::Signal { name, .. } => f.write_str(name),
            ExitCause::Exit { code } => write!(f, "exit code {code}"),
        }
    }
}

impl std::fmt::Display for PluginFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginFault::Crashed { plugin, cause } => {
                write!(f, "plugin '{plugin}' crashed ({cause})")
            }
            PluginFault::Stopped { plugin, reason } => {
                write!(f, "plugin '{plugin}' was stopped ({reason})")
            }
            PluginFault::TimedOut { plugin, after_ms } => write!(
                f,
                "plugin '{plugin}' timed out after {} s",
                seconds_text(Duration::from_millis(*after_ms))
            ),
            PluginFault::Disabled {
                plugin,
                crashes,
                window_seconds,
            } => write!(
                f,
                "plugin '{plugin}' is disabled: it crashed {crashes} times within {window_seconds} s (restart plughost to try it again)"
            ),
            PluginFault::Unavailable { plugin, problem } => {
                write!(f, "plugin '{plugin}' is unavailable: {problem}")
            }
            PluginFault::LimitExceeded { plugin, limit } => {
                write!(f, "plugin '{plugin}' exceeded its {limit}")
            }
            PluginFault::Wedged { plugin, after_ms } => write!(
                f,
                "plugin '{plugin}' stopped responding: its worker did not acknowledge a cancelled call within {} s, so it was replaced",
                seconds_text(Duration::from_millis(*after_ms))
            ),
        }
    }
}

impl PluginError {
    /// A failure of native code: only a message.
    pub fn native(message: impl Into<String>) -> PluginError {
        PluginError {
            message: message.into(),
            ..Default::default()
        }
    }

    /// `<Type>: <message>` (just the type when the message is empty; just
    /// the message for native errors).
    pub fn described(&self) -> String {
        match (self.kind.is_empty(), self.message.is_empty()) {
            (true, _) => self.message.clone(),
            (false, true) => self.kind.clone(),
            (false, false) => format!("{}: {}", self.kind, self.message),
        }
    }

    /// What a result string shows of the exception: its message, as
    /// Flowly's `str(exc)`, or with its type for a contained
    /// `BaseException` (`SystemExit: 3`), which Flowly would not catch.
    pub fn shown(&self) -> String {
        if self.base_exception {
            self.described()
        } else {
            self.message.clone()
        }
    }
}

impl PluginError {
    /// The failure of an isolated plugin's worker; its message is the
    /// fault's text, so every renderer shows it as it shows a raised error.
    pub fn fault(fault: PluginFault) -> PluginError {
        PluginError {
            message: fault.to_string(),
            fault: Some(Box::new(fault)),
            ..Default::default()
        }
    }
}

impl From<String> for PluginError {
    fn from(message: String) -> PluginError {
        PluginError::native(message)
    }
}

impl From<&str> for PluginError {
    fn from(message: &str) -> PluginError {
        PluginError::native(message)
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.described())
    }
}

/// How one tool call ended. Serialised as its [kind](ToolOutcome::kind)
/// (`"ok"`, `"raised"`, `"blocked"`, …); [`ToolOutcome::details`] has the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The handler returned; its result is the text.
    Ok,
    /// The handler raised.
    Raised { error: PluginError },
    /// The tool cannot be used now; `reason` says why (its `check_fn`
    /// said no, a variable it requires is unset, ...).
    Unavailable { reason: Unavailability },
    /// `check_fn` raised.
    CheckFailed { error: PluginError },
    /// A `tool_guard` hook blocked the call.
    Blocked { message: String },
    /// The arguments are not JSON, not an object, or do not match the schema.
    InvalidArguments { problem: ArgumentProblem },
    /// No tool of that name.
    NotFound,
    /// The call ran past its time limit.
    TimedOut { after: Duration },
    /// The caller gave up on the call (a cancelled turn).
    Cancelled,
}

/// Why a tool is unavailable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Unavailability {
    /// Its `check_fn` returned a falsy value.
    CheckFn,
    /// An environment variable it requires (`requires_env`) is unset or empty.
    MissingEnv { variable: String },
    /// What it depends on is missing, in the tool's own words (no web
    /// search provider is available, ...).
    Unmet { problem: String },
}

/// What is wrong with a call's arguments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ArgumentProblem {
    /// The model's argument text is not JSON.
    NotJson,
    /// Valid JSON, but not an object (`got` names what it is: `an array`).
    NotAnObject { got: &'static str },
    /// The object does not match the tool's JSON Schema.
    Schema { problem: String },
}

impl Serialize for ToolOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.kind())
    }
}

/// The particulars of an outcome, for `--json` reports beside its kind.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum OutcomeDetails<'a> {
    Error(&'a PluginError),
    Blocked { message: &'a str },
    Arguments(&'a ArgumentProblem),
    Unavailable(&'a Unavailability),
    TimedOut { after_seconds: f64 },
}

impl ToolOutcome {
    /// The outcome's name, as `tools call --json` and `run --json` show it.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolOutcome::Ok => "ok",
            ToolOutcome::Raised { .. } => "raised",
            ToolOutcome::Unavailable { .. } => "unavailable",
            ToolOutcome::CheckFailed { .. } => "check_failed",
            ToolOutcome::Blocked { .. } => "blocked",
            ToolOutcome::InvalidArguments { .. } => "invalid_arguments",
            ToolOutcome::NotFound => "not_found",
            ToolOutcome::TimedOut { .. } => "timed_out",
            ToolOutcome::Cancelled => "cancelled",
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, ToolOutcome::Ok)
    }

    pub fn is_blocked(&self) -> bool {
        matches!(self, ToolOutcome::Blocked { .. })
    }

    /// What more there is to say than the kind, if anything.
    pub fn details(&self) -> Option<OutcomeDetails<'_>> {
        Some(match self {
            ToolOutcome::Raised { error } | ToolOutcome::CheckFailed { error } => {
                OutcomeDetails::Error(error)
            }
            ToolOutcome::Blocked { message } => OutcomeDetails::Blocked { message },
            ToolOutcome::InvalidArguments { problem } => OutcomeDetails::Arguments(problem),
            ToolOutcome::Unavailable { reason } => OutcomeDetails::Unavailable(reason),
            ToolOutcome::TimedOut { after } => OutcomeDetails::TimedOut {
                after_seconds: after.as_secs_f64(),
            },
            _ => return None,
        })
    }

    /// The plugin failure behind the outcome, if any.
    pub fn error(&self) -> Option<&PluginError> {
        match self {
            ToolOutcome::Raised { error } | ToolOutcome::CheckFailed { error } => Some(error),
            _ => None,
        }
    }
}

/// The result string of a tool call and how the call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// What the model (or the caller) sees, after every transform.
    pub text: String,
    pub outcome: ToolOutcome,
}

impl Serialize for ToolResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ToolResult", 3)?;
        st.serialize_field("text", &self.text)?;
        st.serialize_field("outcome", &self.outcome)?;
        st.serialize_field("details", &self.outcome.details())?;
        st.end()
    }
}

impl ToolResult {
    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// Renders an outcome that is not `Ok` as a dialect's result string.
pub trait Renderer: Send + Sync + 'static {
    /// The result text of a call of `tool` that ended with `outcome`.
    fn render(&self, tool: &str, outcome: &ToolOutcome) -> String;
}

/// plughost's standard result strings: those of the Flowly contract (the
/// primary plugin API), byte for byte. Dialects with other conventions
/// install their own [`Renderer`].
#[derive(Clone, Copy, Debug, Default)]
pub struct StandardRenderer;

impl Renderer for StandardRenderer {
    fn render(&self, tool: &str, outcome: &ToolOutcome) -> String {
        match outcome {
            ToolOutcome::Ok => String::new(),
            ToolOutcome::Raised { error } => format!("Error executing {tool}: {}", error.shown()),
            ToolOutcome::Unavailable { reason } => match reason {
                Unavailability::CheckFn => {
                    format!("Error: {tool} is unavailable (plugin check_fn returned False)")
                }
                Unavailability::MissingEnv { variable } => format!(
                    "Error: {tool} is unavailable: the environment variable {variable} it requires (requires_env) is not set; set it to use the tool"
                ),
                Unavailability::Unmet { problem } => {
                    format!("Error: {tool} is unavailable: {problem}")
                }
            },
            ToolOutcome::CheckFailed { error } => {
                format!("Error: {tool} availability check failed: {}", error.shown())
            }
            ToolOutcome::Blocked { message } => format!("[blocked: {message}]"),
            ToolOutcome::InvalidArguments { problem } => match problem {
                ArgumentProblem::NotJson => {
                    format!("Error: the arguments for {tool} are not valid JSON")
                }
                ArgumentProblem::NotAnObject { got } => {
                    format!("Error: arguments for {tool} must be a JSON object, got {got}")
                }
                ArgumentProblem::Schema { problem } => {
                    format!("Error: invalid arguments for {tool}: {problem}")
                }
            },
            ToolOutcome::NotFound => format!("Error: Tool '{tool}' not found"),
            ToolOutcome::TimedOut { after } => format!(
                "Error executing {tool}: timed out after {} s",
                seconds_text(*after)
            ),
            ToolOutcome::Cancelled => format!("Error executing {tool}: the call was cancelled"),
        }
    }
}

/// `2` for whole seconds, `0.5` otherwise.
pub fn seconds_text(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}
