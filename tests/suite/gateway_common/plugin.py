import json, os, time

from .adapter import FakeChatAdapter, check_requirements

LOG = os.environ.get("GATEWAY_TEST_LOG")
_CTX = None


def note(line):
    if LOG:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def lookup(args, **kwargs):
    q = args.get("q", "")
    note(f"lookup-start {os.getpid()} {q}")
    if "slow" in q:
        time.sleep(0.6)
    note(f"lookup-end {os.getpid()} {q}")
    return json.dumps({"found": q.upper()})


def policy(event=None, **kwargs):
    src = event.source
    note(f"dispatch {src.platform.value} {src.chat_id} {src.user_id} {event.text}")
    if src.user_id == "mallory":
        return {"action": "skip", "reason": "blocked user"}
    if event.text == "remind me":
        note(f"injected {_CTX.inject_message('reminder')}")
    if event.text.startswith("shout "):
        return {"action": "rewrite", "text": event.text[len("shout "):].upper()}
    return None


def on_platform_event(platform, event_type, payload, **kwargs):
    note(f"platform-event {platform} {event_type} {json.dumps(payload, sort_keys=True, ensure_ascii=False)} {sorted(kwargs)}")


def register(ctx):
    global _CTX
    _CTX = ctx
    ctx.register_platform(
        name="fakechat",
        label="FakeChat",
        adapter_factory=lambda cfg: FakeChatAdapter(cfg),
        check_fn=check_requirements,
        required_env=["FAKECHAT_PORT"],
        install_hint="nothing to install",
        max_message_length=2000,
        emoji="💬",
    )
    schema = {"name": "lookup", "description": "Look a word up",
              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    ctx.register_tool("lookup", "fakechat", schema, lookup)
    ctx.register_hook("pre_gateway_dispatch", policy)
    ctx.register_hook("gateway_platform_event", on_platform_event)
