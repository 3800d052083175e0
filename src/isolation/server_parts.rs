//! The server-side parts of an isolated plugin — scheduled tasks, auth
//! modes, audit/usage sinks — which its worker announces but cannot serve:
//! the worker protocol carries tools, hooks, commands, skills and HTTP
//! routes, and these parts need messages of their own (a task run, an
//! authenticator's judgement, every audit row). Rather than dropping them, the host loads
//! the plugin in-process a second time and keeps only these parts of that
//! load (`host::load`), with a warning saying so: its tools and hooks keep
//! running in the worker.

use crate::core::outcome::PluginError;
use crate::core::registry::Registration;
use crate::isolation::protocol::Contribution;
use crate::isolation::{proxy, LoadSpec, Settings, Supervisor};

/// One part the worker announced and does not serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerPart {
    /// `cron task`, `auth mode` or `sink`.
    pub kind: String,
    pub name: String,
}

/// [`crate::isolation::load`], also answering the server parts the
/// worker announced (the same steps: start, proxy, the dialect's renderer).
pub fn load(
    spec: LoadSpec,
    settings: Settings,
) -> Result<(Vec<Registration>, Supervisor, Vec<ServerPart>), PluginError> {
    let renderer =
        crate::dialects::by_name(&spec.dialect).and_then(|d| d.abilities().renderers?.renderer());
    let (sup, contributions) = Supervisor::start(spec, settings)?;
    let (contributions, parts) = split(contributions);
    let mut registrations = proxy::registrations(&sup, contributions);
    if let Some(renderer) = renderer {
        for r in &mut registrations {
            if let Registration::Tool(tool) = r {
                tool.renderer = Some(renderer.clone());
            }
        }
    }
    Ok((registrations, sup, parts))
}

/// The contributions a worker serves, and the server parts it announced.
pub fn split(contributions: Vec<Contribution>) -> (Vec<Contribution>, Vec<ServerPart>) {
    let mut served = Vec::new();
    let mut parts = Vec::new();
    for c in contributions {
        match c {
            Contribution::ServerPart { kind, name } => parts.push(ServerPart { kind, name }),
            other => served.push(other),
        }
    }
    (served, parts)
}

/// Whether `r` is a server part (what the in-process load is kept for).
pub fn is_server_part(r: &Registration) -> bool {
    matches!(
        r,
        Registration::Task(_) | Registration::Authenticator(_) | Registration::Observer(_)
    )
}

/// `cron task plugin_tick, sink audit` for the warning.
pub fn described(parts: &[ServerPart]) -> String {
    parts
        .iter()
        .map(|p| format!("{} {}", p.kind, p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_takes_the_server_parts_out() {
        let (served, parts) = split(vec![
            Contribution::Command {
                name: "c".into(),
                description: String::new(),
                args_hint: String::new(),
            },
            Contribution::ServerPart {
                kind: "cron task".into(),
                name: "tick".into(),
            },
            Contribution::ServerPart {
                kind: "sink".into(),
                name: "audit".into(),
            },
        ]);
        assert_eq!(served.len(), 1);
        assert_eq!(described(&parts), "cron task tick, sink audit");
    }
}
