//! Tool progress in a chat while its turn runs, as Hermes's gateway shows
//! it: one message listing the tools called so far, sent at the first
//! tool call and edited at each next one (a platform that cannot edit
//! gets a new message per call).

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::supervisor::PortSlot;
use crate::agent::AgentEvent;
use crate::dialects::platforms::ChatAddress;

/// The longest argument preview shown after a tool's name.
const PREVIEW_CHARS: usize = 40;

/// A tool call's progress line: `🔧 name: "preview"`.
pub fn line(name: &str, arguments: &str) -> String {
    let args = arguments.trim();
    if args.is_empty() || args == "{}" {
        return format!("🔧 {name}");
    }
    let mut preview: String = args.chars().take(PREVIEW_CHARS).collect();
    if args.chars().count() > PREVIEW_CHARS {
        preview.push('…');
    }
    format!("🔧 {name}: {preview}")
}

/// Relay `events` to the chat at `to` until the turn ends (the sender is dropped).
pub async fn relay(
    mut events: UnboundedReceiver<AgentEvent>,
    slot: Arc<PortSlot>,
    to: ChatAddress,
    show: bool,
) {
    let mut lines: Vec<String> = Vec::new();
    let mut message_id: Option<String> = None;
    while let Some(event) = events.recv().await {
        let AgentEvent::ToolStarted {
            name, arguments, ..
        } = event
        else {
            continue;
        };
        if !show {
            continue;
        }
        let Some(port) = slot.current() else {
            continue;
        };
        lines.push(line(&name, &arguments));
        let text = lines.join("\n");
        let edited = match &message_id {
            Some(id) => port.edit(to.clone(), id.clone(), text).await.is_ok(),
            None => false,
        };
        if !edited {
            let latest = lines.last().cloned().unwrap_or_default();
            let first = message_id.is_none();
            match port
                .send(
                    to.clone(),
                    if first { lines.join("\n") } else { latest },
                    None,
                )
                .await
            {
                Ok(id) => {
                    if first {
                        message_id = id;
                    }
                }
                Err(e) => tracing::warn!("gateway: could not show tool progress: {e}"),
            }
        }
    }
}
