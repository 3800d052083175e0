"""Registers the searxng web backend (``flowly.agent.tools.web_providers.searxng``)."""

from flowly.agent.tools.web_providers.searxng import SearXNGWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(SearXNGWebSearchProvider())
