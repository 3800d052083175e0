"""``gateway.config`` compat (plughost): the platform identity and the
per-platform configuration Hermes's adapters are built from.

``Platform`` is Hermes's enum of platform names; a plugin's own platform
(``Platform("irc")``) is a member made on first use, as Hermes's
``_missing_`` makes it. ``PlatformConfig`` is what ``adapter_factory``
receives: ``enabled``, ``token``, ``api_key``, ``home_channel`` and
``extra`` (the platform's own keys), read by plughost from
``platforms.<name>`` (or ``gateway.platforms.<name>``) of Hermes's
``config.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, Optional


class Platform(Enum):
    LOCAL = "local"
    CLI = "cli"
    API = "api"
    API_SERVER = "api_server"
    TELEGRAM = "telegram"
    DISCORD = "discord"
    WHATSAPP = "whatsapp"
    SLACK = "slack"
    SIGNAL = "signal"
    MATTERMOST = "mattermost"
    MATRIX = "matrix"
    HOMEASSISTANT = "homeassistant"
    EMAIL = "email"
    SMS = "sms"
    WEBHOOK = "webhook"

    @classmethod
    def _missing_(cls, value):
        # A plugin platform: a member of its own, kept so `Platform(x) is Platform(x)`.
        if not isinstance(value, str) or not value:
            return None
        name = value.lower()
        existing = cls._value2member_map_.get(name)
        if existing is not None:
            return existing
        member = object.__new__(cls)
        member._name_ = name.upper().replace("-", "_")
        member._value_ = name
        cls._value2member_map_[name] = member
        return member


@dataclass
class HomeChannel:
    platform: Any = None
    chat_id: str = ""
    name: str = ""
    thread_id: Optional[str] = None

    def to_dict(self) -> dict:
        return {"platform": getattr(self.platform, "value", self.platform), "chat_id": self.chat_id,
                "name": self.name, "thread_id": self.thread_id}


@dataclass
class PlatformConfig:
    enabled: bool = False
    token: Optional[str] = None
    api_key: Optional[str] = None
    home_channel: Optional[HomeChannel] = None
    reply_to_mode: str = "first"
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"enabled": self.enabled, "token": self.token, "api_key": self.api_key,
                "home_channel": self.home_channel.to_dict() if self.home_channel else None,
                "reply_to_mode": self.reply_to_mode, "extra": dict(self.extra)}

    @classmethod
    def from_dict(cls, data: Optional[dict]) -> "PlatformConfig":
        data = dict(data or {})
        home = data.get("home_channel")
        if isinstance(home, dict):
            home = HomeChannel(**{k: v for k, v in home.items() if k in ("platform", "chat_id", "name", "thread_id")})
        elif home is not None and not isinstance(home, HomeChannel):
            home = HomeChannel(chat_id=str(home))
        known = {"enabled", "token", "api_key", "home_channel", "reply_to_mode", "extra"}
        extra = dict(data.get("extra") or {})
        # Keys Hermes's shared loop would move into `extra`.
        for k, v in data.items():
            if k not in known:
                extra.setdefault(k, v)
        return cls(
            enabled=bool(data.get("enabled", False)),
            token=data.get("token"),
            api_key=data.get("api_key"),
            home_channel=home,
            reply_to_mode=str(data.get("reply_to_mode") or "first"),
            extra=extra,
        )
