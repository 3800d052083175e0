"""Registers the local web backend (``flowly.agent.tools.web_providers.local``)."""

from flowly.agent.tools.web_providers.local import LocalExtractProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(LocalExtractProvider())
