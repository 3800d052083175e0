"""``agent.context_engine`` compat (plughost): the base class ``ContextEngine`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class ContextEngine:
    """Base of Hermes's ContextEngine plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
