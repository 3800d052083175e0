"""Chat message types, as ``felix_ai.types`` defines them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    args: dict = field(default_factory=dict)


@dataclass(slots=True)
class ImageAttachment:
    media_type: str = ""
    data: str = ""


@dataclass(slots=True)
class ChatMessage:
    role: str
    content: Any = ""
    tool_call_id: "str | None" = None
    name: "str | None" = None
    tool_calls: "list[ToolCall] | None" = None

    @classmethod
    def model_validate(cls, value: Any) -> "ChatMessage":
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"ChatMessage.model_validate needs a dict, got {type(value).__name__}")
        calls = value.get("tool_calls")
        if calls is not None:
            calls = [c if isinstance(c, ToolCall) else ToolCall(**c) for c in calls]
        return cls(
            role=value["role"],
            content=value.get("content", ""),
            tool_call_id=value.get("tool_call_id"),
            name=value.get("name"),
            tool_calls=calls,
        )

    def model_dump(self, **_: Any) -> dict:
        return asdict(self)


@dataclass(slots=True)
class TokenUsage:
    """Felix's fields (``TokenUsage(input=..., output=...)``, as its example
    plugin's model provider builds it)."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0


@dataclass(slots=True)
class ModelChatResult:
    message: ChatMessage
    stop_reason: str = "end_turn"
    usage: "TokenUsage | None" = None


@dataclass(slots=True)
class ModelRoute:
    """Which provider serves a logical model id, and its own model name."""

    provider: str
    model: str
    modalities: "list[str] | None" = None


@dataclass(slots=True)
class ModelChatOptions:
    temperature: "float | None" = None
    max_tokens: "int | None" = None
    signal: Any = None
    isolate_cache: bool = False
    output_schema: "dict | None" = None


__all__ = ["ChatMessage", "ToolCall", "TokenUsage", "ModelChatResult", "ImageAttachment",
           "ModelRoute", "ModelChatOptions"]
