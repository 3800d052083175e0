"""Registers the firecrawl web backend (``flowly.agent.tools.web_providers.firecrawl``).

Under plughost the backend's module is imported when a search or an
availability check first needs it (``DeferredProvider``), not at start-up;
under another Flowly host it is imported now.
"""

MODULE = "flowly.agent.tools.web_providers.firecrawl"


def register(ctx) -> None:
    try:
        from flowly.agent.tools.web_providers.base import DeferredProvider
    except ImportError:
        from importlib import import_module

        ctx.register_web_search_provider(import_module(MODULE).FirecrawlWebSearchProvider())
    else:
        ctx.register_web_search_provider(DeferredProvider("firecrawl", MODULE, "FirecrawlWebSearchProvider"))
