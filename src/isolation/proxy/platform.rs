//! An isolated plugin's messaging platform as the host's gateway sees it
//! (issue 49 item 5): a [`PlatformFactory`] and [`PlatformPort`] whose
//! every call is a [`Request::Platform`] to the plugin's worker, where the
//! adapter runs (`isolation::worker_platforms`). The adapter's signals
//! come back as host calls into the [`PlatformTable`]'s inlet for it.
//!
//! A worker that dies takes its adapter with it: the port's watch call
//! (answered never, by design) fails then, and the gateway is told with a
//! retryable fatal error, so it reconnects — through a new worker.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::super::protocol::{Contribution, Reply, Request};
use super::super::supervisor::{Subject, Supervisor};
use crate::core::extensions::Extensions;
use crate::core::hooks::BoxFuture;
use crate::dialects::platforms::{
    ChatAddress, ChatSettings, Inlet, PlatformFactory, PlatformPort, PlatformSnapshot,
    PlatformTable, PortError, PortOp, PortSignal, Readiness,
};

/// How long making an adapter in the worker may take.
const CREATE_LIMIT: Duration = Duration::from_secs(30);

/// Register the platforms among a worker's `contributions` in its host's
/// table; the other contributions.
pub(super) fn take(sup: &Supervisor, contributions: Vec<Contribution>) -> Vec<Contribution> {
    let (platforms, others): (Vec<_>, Vec<_>) = contributions
        .into_iter()
        .partition(|c| matches!(c, Contribution::Platform { .. }));
    let platforms: Vec<PlatformSnapshot> = platforms
        .into_iter()
        .filter_map(|c| match c {
            Contribution::Platform { platform } => Some(platform),
            _ => None,
        })
        .collect();
    if let (Some(host), false) = (sup.host_state(), platforms.is_empty()) {
        register(sup, &host, platforms);
    }
    others
}

/// Register the worker's platforms in the host's table (replacing what
/// the plugin registered before).
fn register(sup: &Supervisor, host: &Extensions, platforms: Vec<PlatformSnapshot>) {
    let factories: Vec<Arc<dyn PlatformFactory>> = platforms
        .into_iter()
        .map(|snapshot| {
            Arc::new(ProxyPlatform {
                sup: sup.downgrade(),
                snapshot,
                table: host.get::<PlatformTable>(),
            }) as Arc<dyn PlatformFactory>
        })
        .collect();
    host.get::<PlatformTable>().set_plugin(sup.key(), factories);
}

/// A worker's platform in the host's table, which outlives the plugin's
/// registrations: its supervisor is held weakly, so letting the plugin go
/// still stops its worker the graceful way.
struct ProxyPlatform {
    sup: crate::isolation::supervisor::WeakSupervisor,
    snapshot: PlatformSnapshot,
    table: Arc<PlatformTable>,
}

impl PlatformFactory for ProxyPlatform {
    fn name(&self) -> &str {
        &self.snapshot.name
    }
    fn label(&self) -> &str {
        &self.snapshot.label
    }
    fn plugin(&self) -> &str {
        &self.snapshot.plugin
    }
    fn readiness(&self) -> Readiness {
        self.snapshot.readiness.clone()
    }
    fn settings(&self) -> ChatSettings {
        self.snapshot.settings.clone()
    }

    fn create(&self, inlet: Inlet) -> Result<Arc<dyn PlatformPort>, String> {
        let name = &self.snapshot.name;
        self.table
            .set_inlet(&self.snapshot.plugin, name, inlet.clone());
        let request = Request::Platform {
            platform: name.clone(),
            op: PortOp::Create,
        };
        let Some(sup) = self.sup.upgrade() else {
            return Err(format!("plugin '{}' was unloaded", self.snapshot.plugin));
        };
        match sup.request_blocking(request, CREATE_LIMIT, "making the adapter") {
            Ok(Reply::Port { result: Ok(_) }) => Ok(Arc::new(ProxyPort {
                sup,
                platform: name.as_str().into(),
                inlet,
                watch: std::sync::Mutex::new(None),
            })),
            Ok(Reply::Port { result: Err(e) }) => Err(e.message),
            Ok(other) => Err(format!("its worker answered {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct ProxyPort {
    sup: Supervisor,
    platform: Arc<str>,
    inlet: Inlet,
    /// The watch on the worker while connected.
    watch: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ProxyPort {
    fn call(&self, op: PortOp) -> BoxFuture<Result<Value, PortError>> {
        let sup = self.sup.clone();
        let request = Request::Platform {
            platform: self.platform.to_string(),
            op,
        };
        let subject = Subject::Command(format!("platform {}", self.platform).into());
        Box::pin(async move {
            match sup.request(request, subject).await {
                Ok(Reply::Port { result }) => result,
                Ok(other) => Err(PortError {
                    message: format!("its worker answered {other:?}"),
                    retryable: true,
                }),
                // The worker is gone (or going): a new one may serve.
                Err(e) => Err(PortError {
                    message: e.to_string(),
                    retryable: true,
                }),
            }
        })
    }

    /// Tell the gateway when the worker (and so the adapter) ends.
    fn watch(&self) {
        let watching = self.call(PortOp::Watch);
        let inlet = self.inlet.clone();
        let platform = self.platform.clone();
        let task = tokio::spawn(async move {
            let ended = match watching.await {
                Ok(_) => "its worker stopped watching".to_string(),
                Err(e) => e.message,
            };
            let _ = inlet.send(PortSignal::Fatal {
                code: "worker_ended".into(),
                message: format!(
                    "the adapter of platform '{platform}' ended with its worker: {ended}"
                ),
                retryable: true,
            });
        });
        let old = self
            .watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task);
        if let Some(old) = old {
            old.abort();
        }
    }
}

impl Drop for ProxyPort {
    fn drop(&mut self) {
        if let Some(task) = self.watch.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl PlatformPort for ProxyPort {
    fn connect(&self) -> BoxFuture<Result<(), PortError>> {
        let connecting = self.call(PortOp::Connect);
        let connected = Box::pin(async move { connecting.await.map(|_| ()) });
        self.watch();
        connected
    }

    fn disconnect(&self) -> BoxFuture<()> {
        if let Some(task) = self.watch.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
        let disconnecting = self.call(PortOp::Disconnect);
        Box::pin(async move {
            let _ = disconnecting.await;
        })
    }

    fn send(
        &self,
        to: ChatAddress,
        text: String,
        reply_to: Option<String>,
    ) -> BoxFuture<Result<Option<String>, String>> {
        let sending = self.call(PortOp::Send { to, text, reply_to });
        Box::pin(async move {
            match sending.await {
                Ok(Value::String(id)) => Ok(Some(id)),
                Ok(_) => Ok(None),
                Err(e) => Err(e.message),
            }
        })
    }

    fn edit(
        &self,
        to: ChatAddress,
        message_id: String,
        text: String,
    ) -> BoxFuture<Result<(), String>> {
        let editing = self.call(PortOp::Edit {
            to,
            message_id,
            text,
        });
        Box::pin(async move { editing.await.map(|_| ()).map_err(|e| e.message) })
    }

    fn act(&self, platform: String, verb: String, args: Value) -> BoxFuture<Value> {
        let acting = self.call(PortOp::Act {
            verb: verb.clone(),
            args,
        });
        Box::pin(async move {
            acting.await.unwrap_or_else(|e| {
                serde_json::json!({"ok": false, "error": "action_failed", "detail": format!("{verb} on {platform}: {}", e.message)})
            })
        })
    }
}
