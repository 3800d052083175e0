"""Pluggable web search/extract providers (plughost compat).

:class:`~flowly.agent.tools.web_providers.base.WebSearchProvider` is what
every backend implements; :mod:`~flowly.agent.tools.web_providers.registry`
holds the registered providers and picks the active one per capability.
``kind: backend`` plugins register theirs with
``ctx.register_web_search_provider(...)``.
"""

from __future__ import annotations

__all__ = [
    "WebSearchProvider",
    "register_provider",
    "get_provider",
    "list_providers",
    "get_active_search_provider",
    "get_active_extract_provider",
]


def __getattr__(name: str):
    # The submodules are installed after this package: resolve on use.
    if name == "WebSearchProvider":
        from flowly.agent.tools.web_providers.base import WebSearchProvider

        return WebSearchProvider
    if name in __all__:
        from flowly.agent.tools.web_providers import registry

        return getattr(registry, name)
    if name in ("base", "registry", "_config", "_http", "searxng", "brave", "tavily", "exa", "firecrawl", "parallel", "local", "ddgs"):
        # A submodule reached as an attribute is imported then.
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(
        f"module 'flowly.agent.tools.web_providers' has no attribute {name!r}"
    )
