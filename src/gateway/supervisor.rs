//! One platform's life under the gateway: made and connected when the
//! server starts, its messages handed to the chats while it is connected,
//! disconnected and made anew after a backoff when it fails (the adapter
//! reports a fatal error, or cannot connect), disconnected when the server
//! stops. Its state is written to the host's platform table at each step.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::chats::Chats;
use crate::dialects::platforms::{
    ChatSettings, PlatformFactory, PlatformPort, PlatformState, PlatformTable, PortSignal,
    Readiness,
};

/// The adapter currently connected for a platform: replies go out through
/// the current one, whichever adapter received the message.
#[derive(Default)]
pub struct PortSlot {
    port: RwLock<Option<Arc<dyn PlatformPort>>>,
}

impl PortSlot {
    pub fn current(&self) -> Option<Arc<dyn PlatformPort>> {
        self.port.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, port: Option<Arc<dyn PlatformPort>>) {
        *self.port.write().unwrap_or_else(|e| e.into_inner()) = port;
    }
}

/// Why a connection ended.
enum Ended {
    Stopped,
    Failed { message: String, retryable: bool },
}

/// The wait before reconnection `attempt` (1-based): the first delay,
/// doubled each time, at most the maximum.
pub fn backoff(settings: &ChatSettings, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    settings
        .reconnect_delay
        .saturating_mul(factor)
        .min(settings.reconnect_max)
}

/// Run `factory`'s platform until `stop`.
pub async fn supervise(
    factory: Arc<dyn PlatformFactory>,
    table: Arc<PlatformTable>,
    chats: Arc<Chats>,
    stop: CancellationToken,
) {
    let name = factory.name().to_string();
    match factory.readiness() {
        Readiness::Enabled => {}
        Readiness::Disabled(why) => {
            tracing::info!("gateway: platform '{name}' not started: {why}");
            return table.set_state(&name, PlatformState::Disabled(why));
        }
        Readiness::Unavailable(why) => {
            tracing::warn!("gateway: platform '{name}' not started: {why}");
            return table.set_state(&name, PlatformState::Unavailable(why));
        }
    }
    let settings = factory.settings();
    let slot = Arc::new(PortSlot::default());
    let mut attempt = 0u32;
    loop {
        if attempt == 0 {
            table.set_state(&name, PlatformState::Connecting);
        }
        let ended = connect_and_serve(&factory, &slot, &chats, &settings, &table, &stop).await;
        let (message, retryable) = match ended {
            Ended::Stopped => break,
            Ended::Failed { message, retryable } => (message, retryable),
        };
        if !retryable {
            tracing::error!("gateway: platform '{name}' failed and will not be retried: {message}");
            table.set_state(&name, PlatformState::Failed(message));
            return;
        }
        attempt += 1;
        let wait = backoff(&settings, attempt);
        tracing::warn!(
            "gateway: platform '{name}' failed ({message}); reconnecting in {:.1} s (attempt {attempt})",
            wait.as_secs_f64()
        );
        table.set_state(
            &name,
            PlatformState::Reconnecting {
                attempt,
                error: message,
            },
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => break,
        }
    }
    table.set_state(&name, PlatformState::Stopped);
}

/// One adapter: made, connected, its signals served until it fails or
/// `stop`; disconnected in every case.
async fn connect_and_serve(
    factory: &Arc<dyn PlatformFactory>,
    slot: &Arc<PortSlot>,
    chats: &Arc<Chats>,
    settings: &ChatSettings,
    table: &PlatformTable,
    stop: &CancellationToken,
) -> Ended {
    let name = factory.name();
    let (inlet, mut signals) = tokio::sync::mpsc::unbounded_channel::<PortSignal>();
    let port = match factory.create(inlet) {
        Ok(port) => port,
        Err(message) => {
            return Ended::Failed {
                message: format!("the adapter could not be made: {message}"),
                retryable: true,
            }
        }
    };
    let connected = tokio::select! {
        r = port.connect() => r,
        _ = stop.cancelled() => {
            port.disconnect().await;
            return Ended::Stopped;
        }
    };
    if let Err(e) = connected {
        port.disconnect().await;
        return Ended::Failed {
            message: e.message,
            retryable: e.retryable,
        };
    }
    tracing::info!("gateway: platform '{name}' connected");
    table.set_state(name, PlatformState::Connected);
    slot.set(Some(port.clone()));
    table.set_port(name, Some(port.clone()));
    let ended = loop {
        tokio::select! {
            signal = signals.recv() => match signal {
                Some(PortSignal::Message(message)) => chats.arrive(slot.clone(), settings.clone(), *message),
                Some(PortSignal::PlatformEvent(event)) => chats.platform_event(event),
                Some(PortSignal::Fatal { code, message, retryable }) => {
                    break Ended::Failed { message: format!("{code}: {message}"), retryable };
                }
                None => break Ended::Failed { message: "the adapter went away".into(), retryable: true },
            },
            _ = stop.cancelled() => break Ended::Stopped,
        }
    };
    slot.set(None);
    table.set_port(name, None);
    port.disconnect().await;
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let s = ChatSettings {
            reconnect_delay: Duration::from_millis(100),
            reconnect_max: Duration::from_millis(350),
            ..Default::default()
        };
        let waits: Vec<u128> = (1..=4).map(|a| backoff(&s, a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
    }
}
