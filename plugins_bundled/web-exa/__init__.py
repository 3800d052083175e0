"""Registers the exa web backend (``flowly.agent.tools.web_providers.exa``)."""

from flowly.agent.tools.web_providers.exa import ExaWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(ExaWebSearchProvider())
