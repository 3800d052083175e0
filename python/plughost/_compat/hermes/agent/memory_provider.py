"""``agent.memory_provider`` compat (plughost): the base class ``MemoryProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class MemoryProvider:
    """Base of Hermes's MemoryProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
