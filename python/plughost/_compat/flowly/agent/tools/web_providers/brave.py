"""Brave Search (plughost compat): Flowly's default search backend.

Search only, with a Brave Search API key: ``tools.web.search.apiKey``, else
``$BRAVE_API_KEY``, sent as ``X-Subscription-Token`` to
``GET /res/v1/web/search``.  Available when a key is set and
``tools.web.search.enabled`` is not false.  The service lives at
``https://api.search.brave.com`` unless ``tools.web.search.brave.baseUrl``
or ``$BRAVE_BASE_URL`` says otherwise.  (Flowly's account search proxy is
Flowly Cloud's, not Brave's, and is not offered here.)
"""

from __future__ import annotations

from typing import Any

from flowly.agent.tools.web_providers._config import base_url, text_setting, timeout, web_search_config
from flowly.agent.tools.web_providers._http import ServiceError, request_json
from flowly.agent.tools.web_providers.base import WebSearchProvider

_DEFAULT_BASE = "https://api.search.brave.com"


class BraveWebSearchProvider(WebSearchProvider):
    """Brave Search with an API key (given, else from config or the environment)."""

    def __init__(self, api_key: str | None = None, max_results: int = 5, **_: Any) -> None:
        self._api_key = api_key
        self._max_results = max_results

    @property
    def name(self) -> str:
        return "brave"

    @property
    def display_name(self) -> str:
        return "Brave Search"

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return False

    def _key(self) -> str:
        if self._api_key is not None:
            return self._api_key.strip()
        return text_setting(web_search_config(), "api_key", "BRAVE_API_KEY")

    def is_available(self) -> bool:
        enabled = getattr(web_search_config(), "enabled", True)
        return enabled is not False and bool(self._key())

    def unavailable_reason(self) -> str:
        """Why the provider is unavailable ("" when it is available)."""
        if getattr(web_search_config(), "enabled", True) is False:
            return "disabled (tools.web.search.enabled is false)"
        if not self._key():
            return "no API key (tools.web.search.apiKey or BRAVE_API_KEY)"
        return ""

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        key = self._key()
        if not key:
            return {
                "success": False,
                "error": "Error: Web search not available. No Brave API key "
                "(tools.web.search.apiKey or BRAVE_API_KEY).",
            }
        try:
            count = min(max(int(limit or self._max_results), 1), 20)
        except (TypeError, ValueError):
            count = self._max_results
        try:
            data = request_json(
                "Brave Search",
                "GET",
                f"{base_url('brave', _DEFAULT_BASE)}/res/v1/web/search",
                params={"q": query, "count": count, "extra_snippets": "true", "text_decorations": "false"},
                headers={"X-Subscription-Token": key},
                timeout=timeout("brave", 10.0),
                credentials="the Brave API key (tools.web.search.apiKey or BRAVE_API_KEY)",
            )
        except ServiceError as exc:
            return {"success": False, "error": f"Error: {exc}"}
        web_block = data.get("web") if isinstance(data, dict) else None
        results = web_block.get("results") if isinstance(web_block, dict) else []
        if not isinstance(results, list):
            return {"success": False, "error": "Error: Brave Search answered without web results"}
        web = []
        for i, item in enumerate(r for r in results[:count] if isinstance(r, dict)):
            # Brave's own fields (extra_snippets, age, ...) are kept, as Flowly does.
            entry = dict(item)
            entry.setdefault("title", "")
            entry.setdefault("url", "")
            entry.setdefault("description", "")
            entry["position"] = i + 1
            web.append(entry)
        return {"success": True, "data": {"web": web}}

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "Brave Search",
            "badge": "default",
            "tag": "Brave Search API with your own key.",
            "env_vars": [
                {"key": "BRAVE_API_KEY", "prompt": "Brave Search API key", "url": "https://brave.com/search/api/"},
            ],
        }


__all__ = ["BraveWebSearchProvider"]
