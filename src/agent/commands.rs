//! The agent's slash commands: the command table's rows for the agent
//! ([`crate::core::commands`]) dispatched on their typed ids; every other
//! line goes to the host's router (`/plugins`, the plugins' commands).
//! Before a recognised command's handler runs, the lanes of
//! [`Point::CommandBefore`] fire (Hermes's `pre_command`).

use serde_json::{Map, Value};

use crate::core::commands::{builtin, split_line, BuiltinId, CommandTable, Surface, BUILTINS};
use crate::core::hooks::{HookEvent, Point};

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
        let found = builtin(Surface::Agent, &name, args);
        if let Some(canonical) = self.recognised(&name, found) {
            self.fire_command_before(session, &name, canonical, args)
                .await;
        }
        // Hermes's `/reload-plugins`: the host discovers and loads again.
        if name == RELOAD_COMMAND {
            return Some(match self.host.reload_now().await {
                Ok(report) => report.summary(),
                Err(e) => format!("Error: the plugins were not reloaded: {e}"),
            });
        }
        match found {
            Some(BuiltinId::NewSession) => {
                if let Err(e) = session.reset() {
                    return Some(format!("Error: could not archive the transcript: {e}"));
                }
                self.fire_session(HookEvent::SessionCleared, session, true, false)
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

    /// The canonical name of the command `name` runs, when it is one the
    /// agent recognises (a built-in, `/reload-plugins`, a plugin's).
    fn recognised(&self, name: &str, found: Option<BuiltinId>) -> Option<String> {
        if name == RELOAD_COMMAND {
            return Some(name.to_string());
        }
        if let Some(id) = found {
            return BUILTINS
                .iter()
                .find(|b| b.id == id)
                .and_then(|b| b.names.first())
                .map(|n| n.to_string());
        }
        let registry = self.host.registry();
        registry.command(name).map(|c| c.name.clone())
    }

    /// Fire [`Point::CommandBefore`] with Hermes's `pre_command` keywords;
    /// answers are not used (Hermes v1 ignores them).
    async fn fire_command_before(
        &self,
        session: &Session,
        typed: &str,
        canonical: String,
        args: &str,
    ) {
        let registry = self.host.registry();
        if registry
            .hooks()
            .lanes_at(Point::CommandBefore)
            .next()
            .is_none()
        {
            return;
        }
        let mut params = Map::new();
        params.insert("surface".into(), Value::from("cli"));
        let alias = (typed != canonical).then(|| Value::from(typed));
        params.insert("command".into(), Value::from(canonical));
        params.insert("alias_used".into(), alias.unwrap_or(Value::Null));
        params.insert("args_raw".into(), Value::from(args));
        params.insert("session_key".into(), Value::from(session.key.as_str()));
        params.insert("platform".into(), Value::from("cli"));
        crate::core::loop_points::observe_lanes(
            &registry,
            Point::CommandBefore,
            &session.key,
            params,
        )
        .await;
    }
}
