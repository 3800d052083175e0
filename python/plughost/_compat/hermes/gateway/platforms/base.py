"""``gateway.platforms.base`` compat (plughost): the adapter base class and the
message event platform plugins build.  plughost accepts ``register_platform``
and does not run platform adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional


@dataclass
class MessageEvent:
    text: str = ""
    source: Any = None
    message_id: Optional[str] = None
    metadata: Dict[str, Any] = field(default_factory=dict)


class BasePlatformAdapter:
    """Base of Hermes's gateway platform adapters (plughost: accepted, not run)."""

    def __init__(self, config: Any = None, platform: Any = None) -> None:
        self.config = config
        self.platform = platform

    async def connect(self) -> bool:
        raise NotImplementedError("plughost does not run gateway platform adapters")

    async def disconnect(self) -> None:
        return None

    async def send(self, chat_id: str, content: str, **kwargs: Any) -> Any:
        raise NotImplementedError("plughost does not run gateway platform adapters")
