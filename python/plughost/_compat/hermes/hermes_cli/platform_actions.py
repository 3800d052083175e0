"""Hermes's ``ctx.platform_actions`` (``hermes_cli/platform_actions.py``):
a plugin acting on a connected chat platform as the gateway's bot (adding
a reaction, renaming a thread), behind the ``gateway.platform_actions``
capability.

Every verb is a coroutine answering ``{"ok": True, "action": verb}`` or
``{"ok": False, "error": code, "detail": text}``, never raising. The gate
and the arguments are checked here; plughost's gateway finds the platform's
connected adapter (``src/dialects/hermes/platform/actions.rs``) and runs
:func:`on_adapter` with it, in whichever process the adapter runs.
"""

from __future__ import annotations

import asyncio
import logging

logger = logging.getLogger(__name__)

CAPABILITY_ID = "gateway.platform_actions"
LEGACY_KEY = "allow_platform_actions"


def _failed(code: str, detail: str) -> dict:
    return {"ok": False, "error": code, "detail": detail}


def capability_granted(entry: dict, capability: str = CAPABILITY_ID,
                       legacy: str = LEGACY_KEY) -> bool:
    """``plugins.entries.<id>``: ``granted_capabilities`` lists it, or the
    deprecated ``allow_platform_actions`` is true (plughost's own
    ``capabilities`` list or mapping grants it too)."""
    granted = entry.get("granted_capabilities")
    if isinstance(granted, list) and capability in granted:
        return True
    if entry.get(legacy) is True:
        return True
    own = entry.get("capabilities")
    if isinstance(own, dict):
        return own.get(capability) is True
    return isinstance(own, list) and capability in own


class PlatformActions:
    """The facade bound to one plugin; the gate is read on every call."""

    def __init__(self, plugin_id: str, entry=None, act=None) -> None:
        self._plugin_id = plugin_id
        #: Reads ``plugins.entries.<id>`` now (the operator may grant later).
        self._entry = entry or (lambda: {})
        #: ``act(verb, platform, args) -> dict``: plughost's gateway.
        self._act = act

    async def add_reaction(self, platform, chat_id, message_id, emoji) -> dict:
        return await self._run("add_reaction", platform, chat_id=chat_id,
                               message_id=message_id, emoji=emoji)

    async def set_thread_title(self, platform, chat_id, thread_id, title) -> dict:
        return await self._run("set_thread_title", platform, chat_id=chat_id,
                               thread_id=thread_id, title=title)

    async def set_thread_lifecycle_emoji(self, platform, chat_id, thread_id, emoji) -> dict:
        return await self._run("set_thread_lifecycle_emoji", platform, chat_id=chat_id,
                               thread_id=thread_id, emoji=emoji)

    def _gate(self):
        try:
            granted = capability_granted(self._entry())
        except Exception:  # a check that fails is a refusal
            granted = False
        if granted:
            return None
        pid = self._plugin_id
        return _failed("capability_not_granted",
                       f"plugin {pid!r} lacks the '{CAPABILITY_ID}' capability (grant via consent "
                       f"flow or plugins.entries.{pid}.allow_platform_actions)")

    async def _run(self, verb: str, platform, **args) -> dict:
        result = self._gate()
        if result is None:
            for name, value in (("platform", platform), *args.items()):
                if not isinstance(value, str) or not value.strip():
                    result = _failed("invalid_argument", f"{name} must be a non-empty string")
                    break
        if result is None and self._act is None:
            result = _failed("gateway_unavailable", "no gateway runner is active in this process")
        if result is None:
            try:
                result = await asyncio.to_thread(self._act, verb, platform, args)
            except Exception as exc:
                result = _failed("action_failed", str(exc)[:512])
        detail = "" if result.get("ok") else f" error={result.get('error')}"
        logger.info("platform_action plugin=%s verb=%s platform=%s ok=%s%s",
                    self._plugin_id, verb, platform, bool(result.get("ok")), detail)
        return result


async def on_adapter(adapter, platform: str, verb: str, args: dict) -> dict:
    """Run ``verb`` on a connected ``adapter`` of ``platform``, as Hermes's
    ``_VERBS`` table does (Telegram and Discord implement them)."""
    done = {"ok": True, "action": verb}
    try:
        if platform == "telegram" and verb == "add_reaction":
            ok = await adapter._set_reaction(args["chat_id"], args["message_id"], args["emoji"])
            return done if ok else _failed("action_failed", "telegram set_message_reaction failed")
        if platform == "telegram" and verb == "set_thread_title":
            await adapter.rename_dm_topic(args["chat_id"], int(args["thread_id"]), args["title"])
            return done
        if platform == "discord" and verb == "add_reaction":
            client = getattr(adapter, "_client", None)
            if client is None:
                return _failed("adapter_disconnected", "discord client unavailable")
            try:
                channel_id, message_id = int(args["chat_id"]), int(args["message_id"])
            except ValueError:
                return _failed("invalid_argument", "discord ids must be numeric")
            channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
            message = await channel.fetch_message(message_id)
            await message.add_reaction(args["emoji"])
            return done
        if platform == "discord" and verb == "set_thread_title":
            ok = await adapter.rename_thread(args["thread_id"], args["title"])
            return done if ok is not False else _failed("action_failed", "discord thread rename failed")
        if platform == "discord" and verb == "set_thread_lifecycle_emoji":
            ok = await adapter.rename_thread(args["thread_id"], "", lifecycle_emoji=args["emoji"])
            return done if ok is not False else _failed(
                "action_failed", "discord thread lifecycle emoji update failed")
    except Exception as exc:
        return _failed("action_failed", str(exc)[:512])
    return _failed("unsupported_platform_action", f"{verb} is not implemented for {platform}")
