//! Each chat's messages as turns of the chat's session, one turn at a
//! time per chat, chats in parallel. A message arriving while its chat's
//! turn runs is handled as Hermes's adapters handle it: a photo (or a
//! message with media) is merged into the one waiting and does not
//! interrupt; `/stop` interrupts and drops what waits; any other message
//! interrupts the running turn (its reply is not sent) and waits to run
//! next — replacing the one waiting, or appended to it where the platform
//! merges texts. A message injected by a plugin (`inject_message`) waits
//! for the running turn, appended to what waits. Replies and tool progress go out through the platform's
//! current adapter.
//!
//! A turn runs through [`Agent::send_cancellable`] with the chat's session
//! key, so `pre_gateway_dispatch`, slash commands, the session store and
//! its cluster lease are the HTTP API's own: a chat whose messages reach
//! two replicas has its turns run one after the other, each on the
//! transcript the other left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::supervisor::PortSlot;
use crate::agent::{Agent, Inbound, TurnReport};
use crate::core::hooks::Point;
use crate::core::loop_points::observe_lanes;
use crate::dialects::platforms::{ChatInjector, ChatSettings, InboundChat};

/// A chat with a turn running.
struct Busy {
    /// Cancels the running turn (an interrupting message, `/stop`).
    interrupt: CancellationToken,
    /// The message to run next.
    pending: Option<InboundChat>,
}

/// Where a chat was last heard from: for replies to injected messages.
#[derive(Clone)]
struct Seen {
    slot: Arc<PortSlot>,
    settings: ChatSettings,
    message: InboundChat,
}

/// The gateway's chats.
pub struct Chats {
    agent: Agent,
    /// Cancels every turn (the server's shutdown).
    turns: CancellationToken,
    busy: Mutex<HashMap<String, Busy>>,
    seen: Mutex<HashMap<String, Seen>>,
    last_key: Mutex<Option<String>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Where chats' tasks run (an injection may come from a Python thread).
    runtime: tokio::runtime::Handle,
}

/// The slash command a message is, if any (`/new@bot args` → `new`).
fn command_of(text: &str) -> Option<String> {
    let word = text
        .trim_start()
        .strip_prefix('/')?
        .split_whitespace()
        .next()?;
    let word = word.split('@').next().unwrap_or(word).to_lowercase();
    (!word.is_empty() && !word.contains('/')).then_some(word)
}

fn has_media(m: &InboundChat) -> bool {
    !m.media_urls.is_empty() || m.message_type == "photo"
}

/// Merge `next` into the waiting message as Hermes's
/// `merge_pending_message_event` does; `true` when merged.
fn merge(waiting: &mut InboundChat, next: &InboundChat, merge_text: bool) -> bool {
    let media = has_media(waiting) || has_media(next);
    let texts = merge_text && waiting.message_type == "text" && next.message_type == "text";
    if !media && !texts {
        return false;
    }
    if media {
        waiting.media_urls.extend(next.media_urls.iter().cloned());
        waiting.media_types.extend(next.media_types.iter().cloned());
        if next.message_type == "photo" {
            waiting.message_type = "photo".into();
        }
    }
    if !next.text.is_empty() {
        waiting.text = if waiting.text.is_empty() {
            next.text.clone()
        } else {
            format!("{}\n{}", waiting.text, next.text)
        };
    }
    true
}

impl Chats {
    /// Chats of `agent`'s sessions; call from inside a tokio runtime.
    pub fn new(agent: Agent, turns: CancellationToken) -> Chats {
        Chats {
            agent,
            turns,
            busy: Mutex::default(),
            seen: Mutex::default(),
            last_key: Mutex::default(),
            tasks: Mutex::default(),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// A platform's event that is not a message: its observers hear it
    /// (Hermes's `gateway_platform_event`), in a task of its own so the
    /// adapter's loop never waits for a plugin.
    pub fn platform_event(self: &Arc<Self>, event: Map<String, Value>) {
        let host = self.agent.host().clone();
        let task = self.runtime.spawn(async move {
            let registry = host.registry();
            observe_lanes(&registry, Point::PlatformEvent, "", event).await;
        });
        self.keep(task);
    }

    /// A message from a platform: run it, or queue/merge it behind the
    /// chat's running turn.
    pub fn arrive(
        self: &Arc<Self>,
        slot: Arc<PortSlot>,
        settings: ChatSettings,
        message: InboundChat,
    ) {
        let key = message.session_key.clone();
        if !message.internal {
            let seen = Seen {
                slot: slot.clone(),
                settings: settings.clone(),
                message: message.clone(),
            };
            self.seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), seen);
            *self.last_key.lock().unwrap_or_else(|e| e.into_inner()) = Some(key.clone());
        }
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(chat) = busy.get_mut(&key) {
            match command_of(&message.text).as_deref() {
                Some("stop") => {
                    chat.pending = None;
                    chat.interrupt.cancel();
                }
                _ => {
                    // A photo (Hermes) or an injected message (plughost)
                    // waits without interrupting; an injected one never
                    // replaces what a user sent.
                    let interrupts = !(has_media(&message) || message.internal);
                    let merged = match chat.pending.as_mut() {
                        Some(waiting) => {
                            merge(waiting, &message, settings.merge_text || message.internal)
                        }
                        None => false,
                    };
                    if !merged {
                        chat.pending = Some(message);
                    }
                    if interrupts {
                        chat.interrupt.cancel();
                    }
                }
            }
            return;
        }
        let interrupt = self.turns.child_token();
        busy.insert(
            key.clone(),
            Busy {
                interrupt: interrupt.clone(),
                pending: None,
            },
        );
        drop(busy);
        let chats = self.clone();
        let task = self
            .runtime
            .spawn(async move { chats.run_chat(slot, settings, message, interrupt).await });
        self.keep(task);
    }

    /// Keep `task` among those the shutdown waits for.
    fn keep(&self, task: JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// The chat's turns, one after the other, until nothing waits.
    async fn run_chat(
        self: Arc<Self>,
        slot: Arc<PortSlot>,
        settings: ChatSettings,
        first: InboundChat,
        interrupt: CancellationToken,
    ) {
        let key = first.session_key.clone();
        let (mut message, mut interrupt) = (first, interrupt);
        loop {
            self.turn(&slot, &settings, &message, &interrupt).await;
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            let next = busy.get_mut(&key).and_then(|chat| chat.pending.take());
            match next {
                Some(next) if !self.turns.is_cancelled() => {
                    interrupt = self.turns.child_token();
                    if let Some(chat) = busy.get_mut(&key) {
                        chat.interrupt = interrupt.clone();
                    }
                    message = next;
                }
                _ => {
                    busy.remove(&key);
                    return;
                }
            }
        }
    }

    /// One turn of `message` in its chat's session; its reply sent unless
    /// the turn was interrupted or the message dropped.
    async fn turn(
        &self,
        slot: &Arc<PortSlot>,
        settings: &ChatSettings,
        message: &InboundChat,
        interrupt: &CancellationToken,
    ) -> TurnReport {
        let mut inbound = Inbound::new(&message.session_key, &message.text);
        inbound.channel = message.platform.clone();
        inbound.sender_id = message.user_id.clone().unwrap_or_else(|| "user".into());
        let mut metadata = Map::new();
        metadata.insert("source".into(), message.source_json());
        inbound.metadata = metadata;
        let (events, received) = tokio::sync::mpsc::unbounded_channel();
        let progress = tokio::spawn(super::progress::relay(
            received,
            slot.clone(),
            message.address(),
            settings.tool_progress,
        ));
        let report = self
            .agent
            .send_cancellable(inbound, Some(events), interrupt.clone().cancelled_owned())
            .await;
        let _ = progress.await;
        if report.interrupted || report.skipped.is_some() {
            if let Some(reason) = &report.skipped {
                tracing::info!(
                    "gateway: message in {} dropped by pre_gateway_dispatch: {reason}",
                    message.session_key
                );
            }
            return report;
        }
        let reply = match (&report.reply, &report.error) {
            (Some(text), _) if !text.trim().is_empty() => Some(text.clone()),
            (_, Some(e)) => Some(format!(
                "Sorry, I encountered an error.\n{e}\nTry again or use /reset to start a fresh session."
            )),
            _ => None,
        };
        if let (Some(text), Some(port)) = (reply, slot.current()) {
            let reply_to = message.message_id.clone();
            if let Err(e) = port.send(message.address(), text, reply_to).await {
                tracing::warn!("gateway: reply to {} not sent: {e}", message.session_key);
            }
        }
        report
    }

    /// Wait (at most `grace`) for the chats' tasks to end.
    pub async fn drain(&self, grace: Duration) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!(
                "gateway: chats' turns still running after {} s; left to end",
                grace.as_secs_f64()
            );
        }
    }

    /// The chat a session key names, as last heard from.
    fn seen(&self, key: Option<&str>) -> Option<Seen> {
        let key = match key {
            Some(k) => k.to_string(),
            None => self
                .last_key
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()?,
        };
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
    }
}

impl ChatInjector for Arc<Chats> {
    fn inject(&self, session_key: Option<&str>, content: &str) -> bool {
        let Some(seen) = self.seen(session_key) else {
            return false;
        };
        let mut message = seen.message.clone();
        message.text = content.to_string();
        message.message_id = None;
        message.reply_to_message_id = None;
        message.media_urls.clear();
        message.media_types.clear();
        message.message_type = "text".into();
        message.internal = true;
        self.arrive(seen.slot, seen.settings, message);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> InboundChat {
        InboundChat {
            text: t.into(),
            message_type: "text".into(),
            ..Default::default()
        }
    }

    #[test]
    fn commands_are_read_as_hermes_reads_them() {
        assert_eq!(command_of("/stop").as_deref(), Some("stop"));
        assert_eq!(command_of("/New@bot now").as_deref(), Some("new"));
        assert_eq!(command_of("/usr/bin"), None);
        assert_eq!(command_of("hello"), None);
    }

    #[test]
    fn texts_merge_only_when_the_platform_merges_them() {
        let mut waiting = text("one");
        assert!(!merge(&mut waiting, &text("two"), false));
        assert!(merge(&mut waiting, &text("two"), true));
        assert_eq!(waiting.text, "one\ntwo");
    }

    #[test]
    fn photos_merge_into_the_waiting_message() {
        let mut waiting = text("look");
        let photo = InboundChat {
            message_type: "photo".into(),
            media_urls: vec!["a.jpg".into()],
            ..Default::default()
        };
        assert!(merge(&mut waiting, &photo, false));
        assert_eq!(
            (waiting.message_type.as_str(), waiting.media_urls.len()),
            ("photo", 1)
        );
    }
}
