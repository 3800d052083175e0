"""``agent.browser_provider`` compat (plughost): the base class ``BrowserProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class BrowserProvider:
    """Base of Hermes's BrowserProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
