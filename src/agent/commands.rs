//! The agent's slash commands: the command table's rows for the agent
//! ([`crate::core::commands`]) dispatched on their typed ids; every other
//! line goes to the host's router (`/plugins`, the plugins' commands).

use crate::core::commands::{builtin, split_line, BuiltinId, CommandTable, Surface};
use crate::core::hooks::HookEvent;

use super::session::Session;
use super::Inner;

/// The command that reloads the plugins without a restart (docs/reload.md).
pub const RELOAD_COMMAND: &str = "reload-plugins";

impl Inner {
    /// Run `line` (the text after `/`) as a command of `session`; the reply.
    pub(super) async fn run_command_line(
        &self,
        session: &mut Session,
        line: &str,
    ) -> Option<String> {
        let (name, args) = split_line(line);
        // Hermes's `/reload-plugins`: the host discovers and loads again.
        if name == RELOAD_COMMAND {
            return Some(match self.host.reload_now().await {
                Ok(report) => report.summary(),
                Err(e) => format!("Error: the plugins were not reloaded: {e}"),
            });
        }
        match builtin(Surface::Agent, &name, args) {
            Some(BuiltinId::NewSession) => {
                if let Err(e) = session.reset() {
                    return Some(format!("Error: could not archive the transcript: {e}"));
                }
                self.fire_session(HookEvent::OnSessionReset, session, true, false)
                    .await;
                Some("Started a new session.".into())
            }
            Some(BuiltinId::Compact) => self.compact(session).await,
            // `plugins doctor` of a fresh process has run no hook; here the
            // counts are this process's, turns of the session included.
            Some(BuiltinId::PluginsDoctor) => {
                Some(crate::host::doctor::Report::new(&self.host).text())
            }
            Some(BuiltinId::Help) => {
                Some(CommandTable::new(&self.host.registry()).help_text(Surface::Agent))
            }
            Some(BuiltinId::Plugins) | None => {
                match self.host.run_command(&format!("/{line}")).await {
                    Ok(reply) => reply,
                    Err(crate::host::CommandError::Unknown(name)) => Some(format!(
                        "Unknown command /{name}. Type /help to see the commands."
                    )),
                    Err(e) => Some(format!("Error: {e}")),
                }
            }
        }
    }
}
