"""Registers the tavily web backend (``flowly.agent.tools.web_providers.tavily``)."""

from flowly.agent.tools.web_providers.tavily import TavilyWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(TavilyWebSearchProvider())
