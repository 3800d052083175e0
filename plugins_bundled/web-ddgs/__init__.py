"""Registers the ddgs web backend (``flowly.agent.tools.web_providers.ddgs``)."""

from flowly.agent.tools.web_providers.ddgs import DDGSWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(DDGSWebSearchProvider())
