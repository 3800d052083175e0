"""Registers the brave web backend (``flowly.agent.tools.web_providers.brave``)."""

from flowly.agent.tools.web_providers.brave import BraveWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(BraveWebSearchProvider())
