//! The messaging platforms of a worker's plugin (issue 49 item 5): their
//! factories stay in the worker, and the host's gateway drives each one
//! through [`Request::Platform`](super::protocol::Request::Platform): the
//! adapter is made, connects, sends and edits here, in the plugin's
//! process and confinement, and what it tells the gateway (messages,
//! platform events, a fatal error) goes to the host as a
//! [`HostCall::PlatformSignal`], in order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::protocol::Reply;
use super::worker_plugin::Answer;
use crate::core::extensions::Extensions;
use crate::dialects::host_calls::HostCall;
use crate::dialects::platforms::{
    PlatformFactory, PlatformPort, PlatformSnapshot, PlatformTable, PortError, PortOp,
};

/// The plugin's platforms and the adapters made of them.
#[derive(Default)]
pub(super) struct Platforms {
    factories: HashMap<String, Arc<dyn PlatformFactory>>,
    ports: Mutex<HashMap<String, Arc<dyn PlatformPort>>>,
}

impl Platforms {
    /// The platforms plugin `key` registered in `state` (its load's), and
    /// how the host is told of them.
    pub(super) fn of(state: &Extensions, key: &str) -> (Platforms, Vec<PlatformSnapshot>) {
        let mut platforms = Platforms::default();
        let mut snapshots = Vec::new();
        let Some(table) = state.peek::<PlatformTable>() else {
            return (platforms, snapshots);
        };
        for factory in table.of_plugin(key) {
            snapshots.push(PlatformSnapshot {
                name: factory.name().to_string(),
                label: factory.label().to_string(),
                plugin: key.to_string(),
                readiness: factory.readiness(),
                settings: factory.settings(),
            });
            platforms
                .factories
                .insert(factory.name().to_string(), factory);
        }
        (platforms, snapshots)
    }

    fn port(&self, platform: &str) -> Option<Arc<dyn PlatformPort>> {
        let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        ports.get(platform).cloned()
    }

    /// Serve the gateway's call `op` on `platform`.
    pub(super) fn answer(&self, platform: String, op: PortOp) -> Answer {
        let failed = |message: String| {
            Answer::Now(Reply::Port {
                result: Err(PortError {
                    message,
                    retryable: false,
                }),
            })
        };
        if let PortOp::Create = op {
            return match self.create(&platform) {
                Ok(()) => Answer::Now(Reply::Port {
                    result: Ok(Value::Null),
                }),
                Err(message) => failed(message),
            };
        }
        if let PortOp::Watch = op {
            // Answered never: the host learns the adapter is gone when
            // this worker is; it cancels the call when it lets go.
            return Answer::Later(Box::pin(std::future::pending()));
        }
        let Some(port) = self.port(&platform) else {
            return failed(format!("no adapter of platform '{platform}' was made here"));
        };
        let done = |result| Reply::Port { result };
        let not_sent = |message: String| PortError {
            message,
            retryable: false,
        };
        Answer::Later(match op {
            PortOp::Connect => {
                Box::pin(async move { done(port.connect().await.map(|_| Value::Null)) })
            }
            PortOp::Disconnect => {
                self.ports
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&platform);
                Box::pin(async move {
                    port.disconnect().await;
                    done(Ok(Value::Null))
                })
            }
            PortOp::Send { to, text, reply_to } => Box::pin(async move {
                let sent = port.send(to, text, reply_to).await;
                done(sent.map(Value::from).map_err(not_sent))
            }),
            PortOp::Edit {
                to,
                message_id,
                text,
            } => Box::pin(async move {
                let edited = port.edit(to, message_id, text).await;
                done(edited.map(|_| Value::Null).map_err(not_sent))
            }),
            PortOp::Act { verb, args } => {
                let platform = platform.clone();
                Box::pin(async move { done(Ok(port.act(platform, verb, args).await)) })
            }
            PortOp::Create | PortOp::Watch => unreachable!("answered above"),
        })
    }

    /// Make an adapter of `platform`, its signals forwarded to the host.
    fn create(&self, platform: &str) -> Result<(), String> {
        let factory = self
            .factories
            .get(platform)
            .ok_or_else(|| format!("the plugin registered no platform '{platform}'"))?;
        let bridge = crate::dialects::host_calls::bridge(&Extensions::default())
            .ok_or("this worker has no way to its host")?;
        let (inlet, mut signals) = tokio::sync::mpsc::unbounded_channel();
        let name = platform.to_string();
        std::thread::Builder::new()
            .name("plughost-platform-signals".into())
            .spawn(move || {
                while let Some(signal) = signals.blocking_recv() {
                    let call = HostCall::PlatformSignal {
                        platform: name.clone(),
                        signal,
                    };
                    if let Err(e) = bridge.call(call) {
                        tracing::warn!("platform '{name}': a signal did not reach the host: {e}");
                    }
                }
            })
            .map_err(|e| format!("cannot start its signal thread: {e}"))?;
        let port = factory.create(inlet)?;
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        ports.insert(platform.to_string(), port);
        Ok(())
    }
}
