"""Registers the parallel web backend (``flowly.agent.tools.web_providers.parallel``)."""

from flowly.agent.tools.web_providers.parallel import ParallelWebSearchProvider


def register(ctx) -> None:
    ctx.register_web_search_provider(ParallelWebSearchProvider())
