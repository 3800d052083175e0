"""The old import path of the message types."""

from felix_ai.types import ChatMessage, ToolCall

__all__ = ["ChatMessage", "ToolCall"]
