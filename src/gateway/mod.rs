//! plughost's messaging gateway (`plughost serve`): the platforms plugins
//! registered (`crate::dialects::platforms`) connected, kept connected
//! and stopped with the server ([`supervisor`]), and each chat's messages
//! turned into agent turns in the chat's session ([`chats`]) — the same
//! session store, and so the same leases across replicas, as the HTTP API.
//! Dialect-agnostic: a dialect turns its plugins' adapters into
//! [`PlatformFactory`]s; the gateway speaks to them only through the
//! narrow [`crate::dialects::platforms::PlatformPort`] (inbound in,
//! send/edit out). See `docs/gateway.md`.

pub mod chats;
mod progress;
pub mod supervisor;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::dialects::platforms::{PlatformFactory, PlatformState, PlatformTable};

/// A running gateway; [`Gateway::stop`] ends it.
pub struct Gateway {
    table: Arc<PlatformTable>,
    chats: Arc<chats::Chats>,
    stop: CancellationToken,
    supervisors: Vec<(String, JoinHandle<()>)>,
}

impl Gateway {
    /// Start every platform registered on `agent`'s host (none: `None`,
    /// and nothing runs). `turns` cancels the chats' running turns (the
    /// server's shutdown).
    pub fn start(agent: &Agent, turns: CancellationToken) -> Option<Gateway> {
        // An isolated plugin's platforms are in the table too: their
        // adapters run in its worker (`isolation::proxy::platform`).
        let table = agent.host().extensions().peek::<PlatformTable>()?;
        let platforms: Vec<Arc<dyn PlatformFactory>> = table.all();
        if platforms.is_empty() {
            return None;
        }
        let chats = Arc::new(chats::Chats::new(agent.clone(), turns));
        table.set_injector(Some(Arc::new(chats.clone())));
        let stop = CancellationToken::new();
        let supervisors = platforms
            .into_iter()
            .map(|factory| {
                let name = factory.name().to_string();
                let task = tokio::spawn(supervisor::supervise(
                    factory,
                    table.clone(),
                    chats.clone(),
                    stop.clone(),
                ));
                (name, task)
            })
            .collect();
        Some(Gateway {
            table,
            chats,
            stop,
            supervisors,
        })
    }

    /// The platforms' states, by name.
    pub fn states(&self) -> Vec<(String, PlatformState)> {
        self.table.states()
    }

    /// Disconnect every adapter, then wait (at most `grace`) for the chats'
    /// turns to end.
    pub async fn stop(self, grace: Duration) {
        self.table.set_injector(None);
        self.stop.cancel();
        for (name, task) in self.supervisors {
            if let Err(e) = task.await {
                tracing::warn!("gateway: platform '{name}' supervisor ended abnormally: {e}");
            }
        }
        self.chats.drain(grace).await;
    }
}

/// `/healthz`'s lines for the host's platforms: `platform NAME STATE`.
pub fn health_lines(agent: &Agent) -> String {
    let Some(table) = agent.host().extensions().peek::<PlatformTable>() else {
        return String::new();
    };
    table
        .states()
        .into_iter()
        .map(|(name, state)| format!("platform {name} {state}\n"))
        .collect()
}
