"""Registers the firecrawl web backend (``flowly.agent.tools.web_providers.firecrawl``)."""

from flowly.agent.tools.web_providers.firecrawl import FirecrawlWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(FirecrawlWebSearchProvider())
