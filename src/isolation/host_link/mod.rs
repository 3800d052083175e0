//! The worker→host call channel (issue 47): a plugin in a worker calls
//! back into the host that loaded it (`inject_message`, `emit`,
//! `has_plugin`, `dispatch_tool`, …) on the worker's own socket, while a
//! call of the host's is in flight or at any other time (a task it
//! spawned).
//!
//! The worker sends [`Reply::HostCall`]
//! with a number of its own (envelope id 0) and blocks the calling thread
//! ([`worker_side`]); plughost's reader hands the call to the plugin's
//! [`HostSide`], which runs it on a thread of its own (never on the
//! reader: the call may take as long as a tool dispatched through the
//! host's pipeline) with [`crate::dialects::host_calls::serve`], then
//! sends [`Request::HostAnswer`].
//! What each call means is the dialect's; this module only carries it.

pub mod worker_side;

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use serde_json::Value;

use super::protocol::{Reply, Request};
use super::supervisor::WeakSupervisor;
use crate::core::extensions::Extensions;
use crate::dialects::host_calls::{Deliver, HostCall};

/// How long the host's bus waits for a worker's subscribers of one event
/// before going on with the next (the worker keeps running them).
const DELIVERY_LIMIT: Duration = Duration::from_secs(60);

/// The host side of one isolated plugin's calls: the host that loaded it.
/// Cloned with its [`crate::isolation::LoadSpec`]; when the last clone
/// goes (the plugin's supervisor dropped), what the worker registered on
/// the host is forgotten.
#[derive(Clone, Default)]
pub struct HostSide(Option<Arc<Side>>);

struct Side {
    host: Arc<Extensions>,
    key: String,
    dialect: String,
    /// The plugin's supervisor, once started (events go to its worker).
    supervisor: OnceLock<WeakSupervisor>,
}

impl Drop for Side {
    fn drop(&mut self) {
        crate::dialects::host_calls::forget(&self.host, &self.dialect, &self.key);
    }
}

impl std::fmt::Debug for HostSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(side) => write!(f, "HostSide({})", side.key),
            None => f.write_str("HostSide(none)"),
        }
    }
}

impl HostSide {
    /// The calls of plugin `key` (dialect `dialect`) run on `host`.
    pub fn new(host: &Arc<Extensions>, key: &str, dialect: &str) -> HostSide {
        HostSide(Some(Arc::new(Side {
            host: Arc::clone(host),
            key: key.to_string(),
            dialect: dialect.to_string(),
            supervisor: OnceLock::new(),
        })))
    }

    /// The host's state (none without a host).
    pub fn state(&self) -> Option<Arc<Extensions>> {
        self.0.as_ref().map(|side| side.host.clone())
    }

    /// Its worker's supervisor (set once it started).
    pub fn attach(&self, supervisor: WeakSupervisor) {
        if let Some(side) = &self.0 {
            let _ = side.supervisor.set(supervisor);
        }
    }

    /// What the host keeps with the loaded plugin: dropped as the host
    /// lets the plugin go (before its worker is stopped), it lets the
    /// events already emitted to the plugin reach its worker.
    pub fn unload_guard(&self) -> Option<Box<dyn Send + Sync>> {
        let side = self.0.clone()?;
        Some(Box::new(Draining(side)))
    }

    /// Run host call `call` number `number` on a thread of its own; its
    /// answer goes to `answer` (which sends it to the worker). Without a
    /// host (a bare [`crate::isolation::load`]), refused at once.
    pub fn serve(
        &self,
        number: u64,
        call: HostCall,
        answer: impl FnOnce(Request) + Send + 'static,
    ) {
        // A middleware's `next`: the chain waiting for it runs it.
        if let HostCall::ChainNext { frame, payload } = call {
            super::around::deliver_next(frame, payload, move |result| {
                answer(Request::HostAnswer {
                    call: number,
                    result,
                })
            });
            return;
        }
        let Some(side) = self.0.clone() else {
            answer(Request::HostAnswer {
                call: number,
                result: Err("this plugin was loaded without a host to call".into()),
            });
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("plughost-host-call".into())
            .spawn(move || {
                let deliver: Arc<dyn Deliver> = Arc::new(ToWorker(Arc::downgrade(&side)));
                let result = crate::dialects::host_calls::serve(
                    &side.host,
                    &side.dialect,
                    &side.key,
                    call,
                    deliver,
                );
                answer(Request::HostAnswer {
                    call: number,
                    result,
                });
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot serve a host call of an isolated plugin: {e}");
        }
    }
}

/// See [`HostSide::unload_guard`].
struct Draining(Arc<Side>);

impl Drop for Draining {
    fn drop(&mut self) {
        crate::dialects::host_calls::drain(&self.0.host, &self.0.dialect);
    }
}

/// Events for a plugin's subscribers go to its running worker (none
/// running: not delivered, as to a plugin unloaded meanwhile).
struct ToWorker(Weak<Side>);

impl Deliver for ToWorker {
    fn deliver(&self, event: &str, index: usize, payload: &Value) {
        let Some(sup) = self
            .0
            .upgrade()
            .and_then(|side| side.supervisor.get().and_then(WeakSupervisor::upgrade))
        else {
            return;
        };
        let request = Request::Event {
            event: event.to_string(),
            index,
            payload: payload.clone(),
        };
        match sup.ask_if_running(request, DELIVERY_LIMIT) {
            Some(Ok(Reply::Delivered)) | None => {}
            Some(Ok(other)) => tracing::warn!(
                "plugin '{}' answered {other:?} to event '{event}'",
                sup.key()
            ),
            Some(Err(fault)) => tracing::warn!(
                "event '{event}' did not reach plugin '{}': {fault}",
                sup.key()
            ),
        }
    }
}
