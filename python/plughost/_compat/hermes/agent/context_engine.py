"""``agent.context_engine`` compat (plughost): the base class ``ContextEngine``
context-engine plugins subclass, with Hermes's defaults.

plughost drives the one active engine (``context.engine`` names it) as
Hermes's agent does: ``on_session_start`` on a session's first message,
``update_from_response(usage)`` after every model call, ``compress(messages,
…)`` in place of plughost's ``/compact`` (its list becomes the transcript),
``on_session_reset`` on ``/new``, ``on_session_end`` when the session ends,
and its ``get_tool_schemas()`` tools through the normal tool pipeline
(``src/dialects/hermes/context_engine.rs``). As for memory providers, the
abstract methods are not enforced: an engine that leaves one out still loads.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Dict, List, Optional


class ContextEngine:
    """Base of Hermes's context engines (``ContextCompressor`` is Hermes's default)."""

    name: str = ""

    last_prompt_tokens: int = 0
    last_completion_tokens: int = 0
    last_total_tokens: int = 0
    threshold_tokens: int = 0
    context_length: int = 0
    compression_count: int = 0
    threshold_percent: float = 0.75
    protect_first_n: int = 3
    protect_last_n: int = 6
    emit_automatic_compaction_status: bool = True

    def is_available(self) -> bool:
        return True

    def update_from_response(self, usage: Dict[str, Any]) -> None:
        """Track token usage after every model call."""

    def should_compress(self, prompt_tokens: int = None) -> bool:
        return False

    def should_compress_info(self, prompt_tokens: int = None):
        return self.should_compress(prompt_tokens), None

    def compress(self, messages: List[Dict[str, Any]], current_tokens: Optional[int] = None,
                 focus_topic: Optional[str] = None, force: bool = False,
                 memory_context: str = "") -> List[Dict[str, Any]]:
        return messages

    def prune_tool_results_only(self, messages, current_tokens=None):
        return messages, 0

    def select_context(self, request_messages, *, conversation_messages=None,
                       incoming_message=None, budget_tokens=0):
        return None

    def on_turn_complete(self, messages, usage=None, **kwargs) -> None:
        return None

    def should_compress_preflight(self, messages) -> bool:
        return False

    def has_content_to_compress(self, messages) -> bool:
        return True

    def on_session_start(self, session_id: str, **kwargs) -> None:
        """Session begins."""

    def on_session_end(self, session_id: str, messages: List[Dict[str, Any]]) -> None:
        """A real session boundary."""

    def on_session_reset(self) -> None:
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.compression_count = 0

    def get_tool_schemas(self) -> List[Dict[str, Any]]:
        return []

    def handle_tool_call(self, name: str, args: Dict[str, Any], **kwargs) -> str:
        return json.dumps({"error": f"Unknown context engine tool: {name}"})

    def get_status(self) -> Dict[str, Any]:
        last_prompt = max(self.last_prompt_tokens, 0)
        return {
            "last_prompt_tokens": last_prompt,
            "threshold_tokens": self.threshold_tokens,
            "context_length": self.context_length,
            "usage_percent": min(100, last_prompt / self.context_length * 100) if self.context_length else 0,
            "compression_count": self.compression_count,
        }

    def update_model(self, model: str, context_length: int, base_url: str = "", api_key: str = "",
                     provider: str = "", api_mode: str = "") -> None:
        self.context_length = context_length
        self.threshold_tokens = int(context_length * self.threshold_percent)


def _accepted(fn: Any, wanted: Dict[str, Any]) -> Dict[str, Any]:
    """``wanted`` filtered to what ``fn`` takes (Hermes filters the optional
    ``compress`` arguments by signature, for older engines)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return wanted
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return wanted
    return {k: v for k, v in wanted.items() if k in params}


def _plughost_compress(engine: Any, messages: List[Dict[str, Any]], current_tokens: Optional[int]):
    """``engine.compress`` as a manual ``/compress`` calls it (``force=True``),
    its answer checked: a list of message dicts with a ``role``."""
    fn = engine.compress
    kwargs = _accepted(fn, {"current_tokens": current_tokens, "focus_topic": None,
                            "force": True, "memory_context": ""})
    result = fn(messages, **kwargs)
    if not isinstance(result, list) or not all(isinstance(m, dict) and m.get("role") for m in result):
        raise TypeError(f"compress() must return a list of message dicts with a role, "
                        f"not {type(result).__name__}")
    return result


def _plughost_tool(engine: Any, tool_name: str):
    """A Hermes tool handler for one of ``engine``'s tools: the call goes to
    ``engine.handle_tool_call(tool_name, args)``; its JSON string back."""

    def handle_tool_call(args, **kwargs):
        return engine.handle_tool_call(tool_name, args or {}, **kwargs)

    handle_tool_call.__qualname__ = f"{type(engine).__name__}.handle_tool_call"
    return handle_tool_call
