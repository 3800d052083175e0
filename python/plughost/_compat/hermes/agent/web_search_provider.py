"""``agent.web_search_provider`` compat (plughost): the base class ``WebSearchProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class WebSearchProvider:
    """Base of Hermes's WebSearchProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
