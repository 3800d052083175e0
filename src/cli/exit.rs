//! How the CLI ends: its exit statuses, and the failures it reports.

use crate::host::HostError;
use crate::plugins::config;

/// The CLI's exit statuses (see the module docs of [`crate::cli`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The command did what was asked.
    Success,
    /// A failed operation: a tool call whose result is an error or a
    /// block, an unknown command or skill, a broken config, a failed turn.
    Failed,
    /// Bad command-line input (clap's own errors, malformed `--args`).
    Usage,
    /// A `run` stopped by Ctrl-C: 128 + SIGINT, what a shell reports for a
    /// command that SIGINT ended, so scripts can tell it apart.
    Interrupted,
    /// The status a Hermes plugin's terminal command ended with, passed on.
    Plugin(u8),
}

impl Exit {
    /// [`Exit::Success`] when `ok`, else [`Exit::Failed`].
    pub(crate) fn ok_if(ok: bool) -> Exit {
        if ok {
            Exit::Success
        } else {
            Exit::Failed
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Interrupted => 130,
            Exit::Plugin(code) => code,
        }
    }
}

/// Failures the CLI reports on stderr with an exit code.
pub(crate) struct Failure {
    pub(super) code: Exit,
    pub(super) message: String,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: Exit::Usage,
            message: message.into(),
        }
    }
    pub(crate) fn failed(message: impl Into<String>) -> Failure {
        Failure {
            code: Exit::Failed,
            message: message.into(),
        }
    }
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Failure {
        Failure::failed(e.to_string())
    }
}

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Failure {
        Failure::failed(e.to_string())
    }
}
