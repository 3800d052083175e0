//! Terminal commands its plugins register (`plughost <dialect> NAME`).

use crate::core::extensions::Extensions;

/// A dialect whose plugins register commands of the terminal.
pub trait TerminalCommands: Send + Sync {
    /// The terminal commands its plugins registered on the host whose state
    /// is `state`: `(name, help, plugin)`.
    fn commands(&self, state: &Extensions) -> Vec<(String, String, String)>;
    /// Run its terminal command `name`: the command's exit status.
    fn run(&self, state: &Extensions, name: &str, args: &[String]) -> Result<u8, TerminalError>;
}

/// Why a dialect's terminal command did not run: the name is unknown (a
/// usage error), or the command failed.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    #[error("{0}")]
    Unknown(String),
    #[error("{0}")]
    Failed(String),
}
