"""``gateway.session`` compat (plughost): where a message came from.

plughost's only platform is ``cli``; a ``SessionSource`` and its session
key are built the way Hermes builds them, so plugins that make one keep
working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class SessionSource:
    platform: str = "cli"
    chat_id: str = ""
    chat_type: str = "dm"
    user_id: Optional[str] = None
    user_name: Optional[str] = None
    thread_id: Optional[str] = None
    chat_name: Optional[str] = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def build_session_key(source: SessionSource) -> str:
    """``agent:main:<platform>:<chat_type>:<chat_id>[:<thread_id>]``, Hermes's key shape."""
    key = f"agent:main:{source.platform}:{source.chat_type}:{source.chat_id}"
    return f"{key}:{source.thread_id}" if source.thread_id else key
