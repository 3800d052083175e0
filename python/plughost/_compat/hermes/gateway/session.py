"""``gateway.session`` compat (plughost): where a message came from.

A ``SessionSource`` names the platform, the chat and the user of a
message; its session key is built the way Hermes builds it
(``agent:main:<platform>:<chat_type>:<chat_id>[:<thread_id>]``, a group
chat per user unless configured otherwise). plughost's gateway runs each
chat's turns in the session of that key; messages of ``plughost
run``/``chat`` come from platform ``cli`` and those of
``/v1/chat/completions`` from platform ``api``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


def _platform_name(platform) -> str:
    value = getattr(platform, "value", platform)
    return str(value or "").lower()


@dataclass
class SessionSource:
    platform: Any = "cli"
    chat_id: str = ""
    chat_name: Optional[str] = None
    chat_type: str = "dm"
    user_id: Optional[str] = None
    user_name: Optional[str] = None
    thread_id: Optional[str] = None
    chat_topic: Optional[str] = None
    user_id_alt: Optional[str] = None
    chat_id_alt: Optional[str] = None
    is_bot: bool = False
    guild_id: Optional[str] = None
    parent_chat_id: Optional[str] = None
    message_id: Optional[str] = None
    extra: dict = field(default_factory=dict)
    scope_id: Optional[str] = None
    # The platform's own authorisation (a role it checked) let the user in.
    role_authorized: bool = False
    # A thread the adapter created for this message, and the title it gave it.
    auto_thread_created: bool = False
    auto_thread_initial_name: Optional[str] = None

    @property
    def description(self) -> str:
        who = self.user_name or self.user_id or "unknown"
        where = self.chat_name or self.chat_id
        if self.chat_type == "dm":
            return f"DM with {who}"
        return f"{self.chat_type} {where} (user {who})"

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()}
        out["platform"] = _platform_name(self.platform)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "SessionSource":
        data = dict(data or {})
        try:
            from gateway.config import Platform

            data["platform"] = Platform(_platform_name(data.get("platform", "cli")))
        except Exception:
            pass
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def build_session_key(
    source: SessionSource,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
) -> str:
    """Hermes's session key of a message's source."""
    key = f"agent:main:{_platform_name(source.platform)}:{source.chat_type}:{source.chat_id}"
    if source.thread_id:
        key = f"{key}:{source.thread_id}"
        if thread_sessions_per_user and source.user_id:
            key = f"{key}:{source.user_id}"
    elif source.chat_type != "dm" and group_sessions_per_user and source.user_id:
        key = f"{key}:{source.user_id}"
    return key
