//! What `pre_gateway_dispatch` receives as Hermes's `MessageEvent`: the
//! inbound message's fields, its source's platform, chat and user. A
//! message of plughost's gateway carries them (the agent's inbound
//! metadata `source`, [`crate::dialects::platforms::InboundChat`]); one of
//! `/v1/chat/completions` comes from platform `api`, one of `plughost
//! run`/`chat` from platform `cli`, its chat the session and its user the
//! sender.

use serde_json::{json, Value};

use crate::core::contexts::InboundMessage;

/// The channel `serve`'s OpenAI-compatible endpoint gives its messages.
const API_CHANNEL: &str = "openai";

/// Hermes's platform name of a channel.
pub fn platform_of(channel: &str) -> &str {
    match channel {
        API_CHANNEL => "api",
        "" => "cli",
        other => other,
    }
}

/// The fields `gateway.platforms.event._plughost_event` builds the
/// `MessageEvent` from; `text` is the message's current text.
pub fn wire(event: &InboundMessage) -> Value {
    let mut wire = match event.metadata.get("source") {
        Some(Value::Object(source)) => Value::Object(source.clone()),
        _ => json!({
            "platform": platform_of(&event.channel),
            "chat_id": event.session_key,
            "chat_type": "dm",
            "user_id": event.sender_id,
            "user_name": event.sender_id,
            "message_type": "text",
        }),
    };
    wire["text"] = Value::String(event.content.clone());
    wire
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_and_cli_messages_have_their_platforms() {
        let api = InboundMessage {
            content: "hi".into(),
            channel: "openai".into(),
            sender_id: "u1".into(),
            session_key: "s".into(),
            ..Default::default()
        };
        let w = wire(&api);
        assert_eq!(
            (w["platform"].as_str(), w["chat_id"].as_str()),
            (Some("api"), Some("s"))
        );
        let cli = InboundMessage {
            channel: "cli".into(),
            ..api.clone()
        };
        assert_eq!(wire(&cli)["platform"], "cli");
    }

    #[test]
    fn a_gateway_message_keeps_its_source() {
        let mut m = InboundMessage {
            content: "rewritten".into(),
            channel: "irc".into(),
            ..Default::default()
        };
        m.metadata.insert(
            "source".into(),
            json!({"platform": "irc", "chat_id": "#c", "user_id": "bob", "text": "old"}),
        );
        let w = wire(&m);
        assert_eq!(
            (w["chat_id"].as_str(), w["text"].as_str()),
            (Some("#c"), Some("rewritten"))
        );
    }
}
