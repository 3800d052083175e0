"""Registered web providers and the active one per capability (plughost compat).

Which provider serves ``search`` (or ``extract``), in Flowly's order:

1. ``tools.web.search.searchBackend`` / ``extractBackend``, else
   ``tools.web.search.backend``: a configured provider that is registered
   and has the capability is used even when unavailable, so the tool can
   say precisely what is missing;
2. else the one registered provider with the capability that is available;
3. else the first available one in :data:`DEFAULT_PREFERENCE`;
4. else none (the tool answers with a setup hint).
"""

from __future__ import annotations

import threading
# `typing` only for annotations (strings here): importing it costs
# milliseconds at every start that loads a web backend.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

from flowly.agent.tools.web_providers._config import web_search_config
from flowly.agent.tools.web_providers.base import WebSearchProvider


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


DEFAULT_PREFERENCE = (
    "brave",
    "firecrawl",
    "parallel",
    "tavily",
    "exa",
    "searxng",
    "ddgs",
    "xai",
    "local",
)

_providers: dict[str, WebSearchProvider] = {}
_lock = threading.RLock()


def register_provider(provider: WebSearchProvider) -> None:
    """Register *provider* under its ``name`` (a later one replaces it)."""
    if not isinstance(provider, WebSearchProvider):
        raise TypeError(
            "register_provider() expects a WebSearchProvider instance, "
            f"got {type(provider).__name__}"
        )
    name = provider.name
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a web provider's name must be a non-empty string")
    with _lock:
        replaced = _providers.get(name.strip())
        _providers[name.strip()] = provider
    # The same provider class registering again is the same plugin loaded
    # again (a second host in the process, a reload): replaced silently.
    # Only another provider taking the name is worth a warning.
    if replaced is not None and not _same_kind(replaced, provider):
        _logger().warning("web provider '%s' registered again; the later one is used", name)


def _same_kind(a: WebSearchProvider, b: WebSearchProvider) -> bool:
    """Whether *a* and *b* are instances of one provider class (by module
    and name: a reloaded module makes a new class object)."""
    ta, tb = type(a), type(b)
    return ta is tb or (ta.__module__, ta.__qualname__) == (tb.__module__, tb.__qualname__)


def get_provider(name: str) -> Optional[WebSearchProvider]:
    """The provider registered as *name*, or None."""
    if not isinstance(name, str):
        return None
    with _lock:
        return _providers.get(name.strip())


def list_providers() -> list[WebSearchProvider]:
    """Every registered provider, by name."""
    with _lock:
        return sorted(_providers.values(), key=lambda p: p.name)


def configured_backend(capability: str) -> str:
    """``<capability>Backend``, else ``backend``, from ``tools.web.search``; "" if unset."""
    search = web_search_config()
    if search is None:
        return ""
    for key in (f"{capability}_backend", "backend"):
        value = getattr(search, key, "")
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def marked_default() -> str:
    """The provider whose settings say ``default: true`` (Brave's is
    ``tools.web.search.default``, the others' ``tools.web.search.<name>.default``),
    in preference order; "" when none is."""
    search = web_search_config()
    if search is None:
        return ""
    for name in DEFAULT_PREFERENCE:
        section = search if name == "brave" else getattr(search, name, None)
        if section is not None and getattr(section, "default", False) is True:
            return name
    return ""


def capable(provider: WebSearchProvider, capability: str) -> bool:
    try:
        if capability == "search":
            return bool(provider.supports_search())
        if capability == "extract":
            return bool(provider.supports_extract())
    except Exception as exc:  # a broken provider must not break resolution
        _logger().warning("web provider %r: supports_%s() raised %r", provider.name, capability, exc)
    return False


def available(provider: WebSearchProvider) -> bool:
    """``provider.is_available()``, with a raise counted as unavailable."""
    try:
        return bool(provider.is_available())
    except Exception as exc:
        _logger().warning("web provider %r: is_available() raised %r", provider.name, exc)
        return False


def resolve(capability: str, configured: str = "") -> Optional[WebSearchProvider]:
    """The active provider for *capability* (``search`` or ``extract``)."""
    with _lock:
        snapshot = dict(_providers)
    if configured:
        chosen = snapshot.get(configured)
        if chosen is not None and capable(chosen, capability):
            return chosen
        if chosen is None:
            _logger().warning(
                "web backend '%s' is configured but no plugin registers it; choosing another",
                configured,
            )
        else:
            _logger().warning(
                "web backend '%s' is configured but cannot %s; choosing another",
                configured,
                capability,
            )
    eligible = [p for p in snapshot.values() if capable(p, capability) and available(p)]
    if len(eligible) == 1:
        return eligible[0]
    for name in DEFAULT_PREFERENCE:
        provider = snapshot.get(name)
        if provider is not None and capable(provider, capability) and available(provider):
            return provider
    return None


def get_active_search_provider() -> Optional[WebSearchProvider]:
    """The provider ``web_search`` uses, or None."""
    return resolve("search", configured_backend("search") or marked_default())


def get_active_extract_provider() -> Optional[WebSearchProvider]:
    """The provider ``web_extract`` uses, or None."""
    return resolve("extract", configured_backend("extract") or marked_default())


__all__ = [
    "DEFAULT_PREFERENCE",
    "register_provider",
    "get_provider",
    "list_providers",
    "get_active_search_provider",
    "get_active_extract_provider",
]
