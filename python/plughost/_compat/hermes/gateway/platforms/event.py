"""``gateway.platforms.event`` compat (plughost): the message event every
adapter produces, as Hermes defines it (``MessageEvent``, ``MessageType``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Dict, List, Optional

from gateway.session import SessionSource


class MessageType(Enum):
    TEXT = "text"
    LOCATION = "location"
    PHOTO = "photo"
    VIDEO = "video"
    AUDIO = "audio"
    VOICE = "voice"
    DOCUMENT = "document"
    STICKER = "sticker"
    COMMAND = "command"


class ProcessingOutcome(Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"


@dataclass
class MessageEvent:
    """An incoming message from a platform, normalized."""

    text: str
    message_type: MessageType = MessageType.TEXT
    source: SessionSource = None
    raw_message: Any = None
    message_id: Optional[str] = None
    platform_update_id: Optional[int] = None
    media_urls: List[str] = field(default_factory=list)
    media_types: List[str] = field(default_factory=list)
    reply_to_message_id: Optional[str] = None
    reply_to_text: Optional[str] = None
    auto_skill: Any = None
    channel_prompt: Optional[str] = None
    internal: bool = False
    context_only: bool = False
    timestamp: datetime = field(default_factory=datetime.now)
    # Hermes's newer fields (keywords; appended so the order above stands).
    user_id: Optional[str] = None
    user_name: Optional[str] = None
    media_text_inlined: List[Optional[bool]] = field(default_factory=list)
    reply_to_author_id: Optional[str] = None
    reply_to_author_name: Optional[str] = None
    reply_to_is_own_message: bool = False
    prompt_response: Optional[Dict[str, Any]] = None
    channel_context: Optional[str] = None
    # Free-form per-event metadata; plugins read it with ``.get()``.
    metadata: Dict[str, Any] = field(default_factory=dict)
    # False: the event's text may not run gateway commands (a proactive event).
    allow_gateway_control: bool = True

    def is_command(self) -> bool:
        return self.allow_gateway_control and (self.text or "").startswith("/")

    def get_command(self) -> Optional[str]:
        if not self.is_command():
            return None
        parts = self.text.split(maxsplit=1)
        raw = parts[0][1:].lower() if parts else None
        if raw and "@" in raw:
            raw = raw.split("@", 1)[0]
        if raw and "/" in raw:
            return None
        return raw

    def get_command_args(self) -> str:
        if not self.is_command():
            return self.text
        parts = self.text.split(maxsplit=1)
        args = parts[1] if len(parts) > 1 else ""
        return args.replace("\u2014\u2014", "--").replace("\u2014", "--").replace("\u2013", "-")


def _plughost_wire(event: "MessageEvent") -> dict:
    """The event as plughost's gateway carries it (plain fields)."""
    src = event.source or SessionSource()
    platform = getattr(src.platform, "value", src.platform)
    mtype = getattr(event.message_type, "value", event.message_type) or "text"
    def s(v):
        return None if v is None else str(v)
    return {
        "platform": str(platform or ""),
        "chat_id": str(src.chat_id or ""),
        "chat_type": str(src.chat_type or "dm"),
        "chat_name": s(src.chat_name),
        "user_id": s(src.user_id),
        "user_name": s(src.user_name),
        "thread_id": s(src.thread_id),
        "message_id": s(event.message_id),
        "reply_to_message_id": s(event.reply_to_message_id),
        "text": str(event.text or ""),
        "message_type": str(mtype),
        "media_urls": [str(u) for u in (event.media_urls or [])],
        "media_types": [str(u) for u in (event.media_types or [])],
        "internal": bool(event.internal),
    }


def _plughost_event(wire: dict) -> "MessageEvent":
    """A ``MessageEvent`` from what plughost carried (the hooks' view)."""
    from gateway.config import Platform

    platform = wire.get("platform") or "cli"
    try:
        platform = Platform(platform)
    except Exception:
        pass
    source = SessionSource(
        platform=platform,
        chat_id=wire.get("chat_id") or "",
        chat_name=wire.get("chat_name"),
        chat_type=wire.get("chat_type") or "dm",
        user_id=wire.get("user_id"),
        user_name=wire.get("user_name"),
        thread_id=wire.get("thread_id"),
        message_id=wire.get("message_id"),
    )
    try:
        mtype = MessageType(wire.get("message_type") or "text")
    except ValueError:
        mtype = MessageType.TEXT
    return MessageEvent(
        text=wire.get("text") or "",
        message_type=mtype,
        source=source,
        message_id=wire.get("message_id"),
        media_urls=list(wire.get("media_urls") or []),
        media_types=list(wire.get("media_types") or []),
        reply_to_message_id=wire.get("reply_to_message_id"),
        internal=bool(wire.get("internal")),
    )
