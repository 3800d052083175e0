"""``agent.video_gen_provider`` compat (plughost): the base class ``VideoGenProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class VideoGenProvider:
    """Base of Hermes's VideoGenProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
