"""``agent.memory_manager`` compat (plughost): the helpers memory plugins
import from Hermes's ``MemoryManager`` module (``agent/memory_manager.py``).

plughost drives the one active provider itself (see
``agent.memory_provider``); what is here is what plugins call:
``sanitize_context`` (honcho cleans what its backend returns with it) and
``build_memory_context_block``.
"""

from __future__ import annotations

import re

from agent.memory_provider import _plughost_fence

_FENCE_TAG_RE = re.compile(r"</?\s*memory-context\s*>", re.IGNORECASE)
_INTERNAL_CONTEXT_RE = re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.IGNORECASE)
_INTERNAL_NOTE_RE = re.compile(
    r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.\s*"
    r"Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
    re.IGNORECASE,
)


def sanitize_context(text: str) -> str:
    """``text`` without recalled-memory fencing: whole ``<memory-context>``
    blocks, the system note that opens one, and stray fence tags."""
    for pattern in (_INTERNAL_CONTEXT_RE, _INTERNAL_NOTE_RE, _FENCE_TAG_RE):
        text = pattern.sub("", text)
    return text


def build_memory_context_block(raw_context: str) -> str:
    """Recalled memory fenced in ``<memory-context>`` with its system note,
    as plughost adds it to the turn's user message; ``""`` for nothing."""
    return _plughost_fence(raw_context)
