//! Hermes's `ctx.platform_actions` (issue 49 item 3): a plugin acts on a
//! connected platform as the gateway's bot, behind the
//! `gateway.platform_actions` capability, with Hermes's result objects for
//! every way it cannot (not granted, bad arguments, no gateway, an unknown
//! platform, no adapter registered). The adapter here is a Telegram-like
//! one on the fake chat service (`gateway_common`): its `_set_reaction`
//! edits the message, which the service sees.
use crate::common;
use crate::gateway_common::{homes, serve, ChatService, Seen, ADAPTER};

use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const PLUGIN: &str = r#"
import json
from gateway.config import Platform
from .adapter import FakeChatAdapter, check_requirements

_CTX = None


class TelegramLike(FakeChatAdapter):
    def __init__(self, config, **kwargs):
        super().__init__(config)
        self.platform = Platform("telegram")

    async def _set_reaction(self, chat_id, message_id, emoji):
        ack = await self._request({"op": "edit", "chat_id": chat_id, "message_id": message_id,
                                   "text": f"reaction {emoji}"})
        return bool(ack.get("ok"))


async def react(args, **kwargs):
    result = await _CTX.platform_actions.add_reaction(
        args.get("platform", "telegram"), args.get("chat", ""), args.get("msg", ""), "👍")
    return json.dumps(result, sort_keys=True)


def register(ctx):
    global _CTX
    _CTX = ctx
    ctx.register_platform(name="telegram", label="TelegramLike",
                          adapter_factory=lambda cfg: TelegramLike(cfg), check_fn=check_requirements)
    schema = {"name": "react", "description": "React to a message",
              "parameters": {"type": "object", "properties": {
                  "platform": {"type": "string"}, "chat": {"type": "string"}, "msg": {"type": "string"}}}}
    ctx.register_tool("react", "actions", schema, react, is_async=True)
"#;

const MANIFEST: &str = "name: actions\nkind: platform\nversion: 1.0.0\n";

/// The home of `homes` with the plugin `actions` instead, the Hermes home
/// enabling its platform `telegram` on `port`; granted the capability when
/// `granted`.
fn action_homes(port: u16, granted: bool) -> (tempfile::TempDir, tempfile::TempDir) {
    let (_, hermes) = homes(port);
    let home = common::home_with(&["actions"]);
    common::write_plugin(
        &home.path().join("plugins"),
        "actions",
        MANIFEST,
        &[("__init__.py", PLUGIN), ("adapter.py", ADAPTER)],
    );
    let grant = if granted {
        "plugins:\n  entries:\n    actions:\n      granted_capabilities: [gateway.platform_actions]\n"
    } else {
        ""
    };
    std::fs::write(
        hermes.path().join("config.yaml"),
        format!(
            "platforms:\n  telegram:\n    enabled: true\n    extra:\n      port: {port}\n{grant}"
        ),
    )
    .unwrap();
    (home, hermes)
}

/// `tools call react` with `args` outside `serve` (no gateway): its output.
fn call_outside(granted: bool, args: &str) -> serde_json::Value {
    let (home, hermes) = action_homes(1, granted);
    let bundled = common::no_bundled();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args(["tools", "call", "react", "--args", args])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn platform_actions_are_refused_without_the_capability_a_gateway_or_good_arguments() {
    let args = r#"{"platform": "telegram", "chat": "alice", "msg": "m1"}"#;
    let denied = call_outside(false, args);
    assert_eq!(denied["ok"], false, "{denied}");
    assert_eq!(denied["error"], "capability_not_granted", "{denied}");
    assert_eq!(
        denied["detail"],
        "plugin 'actions' lacks the 'gateway.platform_actions' capability (grant via consent flow or plugins.entries.actions.allow_platform_actions)"
    );
    let no_gateway = call_outside(true, args);
    assert_eq!(no_gateway["error"], "gateway_unavailable", "{no_gateway}");
    assert_eq!(
        no_gateway["detail"],
        "no gateway runner is active in this process"
    );
    let bad = call_outside(
        true,
        r#"{"platform": "telegram", "chat": " ", "msg": "m1"}"#,
    );
    assert_eq!(bad["error"], "invalid_argument", "{bad}");
    assert_eq!(bad["detail"], "chat_id must be a non-empty string");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_plugin_reacts_through_the_connected_adapter_and_hears_why_not_elsewhere() {
    let service = ChatService::start().await;
    let (home, hermes) = action_homes(service.port, true);
    let shared = tempfile::tempdir().unwrap();
    let script = shared.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: react\n        args: {platform: \"{user_message}\", chat: \"alice\", msg: \"m1\"}\n  - say: \"{tool_results}\"\n",
    )
    .unwrap();
    let _server = serve(
        home.path(),
        hermes.path(),
        &script,
        &shared.path().join("events.log"),
        None,
    );
    service.wait_connected(WAIT, 1).await;
    // Each chat's message names the platform its turn acts on.
    for (chat, platform, id) in [
        ("alice", "telegram", "m1"),
        ("bob", "smoke-signals", "m2"),
        ("carol", "discord", "m3"),
    ] {
        service.deliver(None, chat, chat, platform, id);
    }
    let reply = |seen: &[Seen], chat: &str| -> Option<serde_json::Value> {
        seen.iter().find_map(|x| match x {
            Seen::Sent { chat: c, text, .. } if c == chat && text.starts_with('{') => {
                serde_json::from_str(text).ok()
            }
            _ => None,
        })
    };
    let seen = service
        .wait_for(WAIT, "three replies", |seen| {
            ["alice", "bob", "carol"]
                .iter()
                .all(|c| reply(seen, c).is_some())
        })
        .await;
    assert_eq!(
        reply(&seen, "alice").unwrap(),
        serde_json::json!({"ok": true, "action": "add_reaction"})
    );
    assert!(
        seen.iter()
            .any(|x| matches!(x, Seen::Edited { chat, id, text }
            if chat == "alice" && id == "m1" && text == "reaction 👍")),
        "{seen:?}"
    );
    let bob = reply(&seen, "bob").unwrap();
    assert_eq!(bob["error"], "unknown_platform", "{bob}");
    assert_eq!(bob["detail"], "unknown platform 'smoke-signals'");
    let carol = reply(&seen, "carol").unwrap();
    assert_eq!(carol["error"], "adapter_not_registered", "{carol}");
    assert_eq!(carol["detail"], "no discord adapter is registered");
}
