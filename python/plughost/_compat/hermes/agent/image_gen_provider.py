"""``agent.image_gen_provider`` compat (plughost): the base class ``ImageGenProvider`` plugins subclass.

Registered instances are accepted and not used by plughost.
"""

from __future__ import annotations


class ImageGenProvider:
    """Base of Hermes's ImageGenProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    def is_available(self) -> bool:
        return True
