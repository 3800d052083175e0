"""``agent.transcription_provider`` compat (plughost): the base class ``TranscriptionProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class TranscriptionProvider:
    """Base of Hermes's TranscriptionProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
