"""``agent.tts_provider`` compat (plughost): the base class ``TTSProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class TTSProvider:
    """Base of Hermes's TTSProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
