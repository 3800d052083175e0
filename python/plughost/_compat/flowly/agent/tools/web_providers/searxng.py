"""SearXNG: search through a self-hosted metasearch instance (plughost compat).

Search only.  The instance URL is ``tools.web.search.searxng.url``, else
``$SEARXNG_URL``; the provider is available when
``tools.web.search.searxng.enabled`` is true and a URL is set.  Uses the
instance's JSON API (``GET <url>/search?q=...&format=json``), which the
instance must allow (``search.formats`` in its settings).
"""

from __future__ import annotations

from typing import Any

from flowly.agent.tools.web_providers._config import provider_section, text_setting, timeout
from flowly.agent.tools.web_providers._http import ServiceError, request_json
from flowly.agent.tools.web_providers.base import WebSearchProvider


def _url() -> str:
    return text_setting(provider_section("searxng"), "url", "SEARXNG_URL").rstrip("/")


class SearXNGWebSearchProvider(WebSearchProvider):
    """Search via a SearXNG instance."""

    @property
    def name(self) -> str:
        return "searxng"

    @property
    def display_name(self) -> str:
        return "SearXNG"

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return False

    def is_available(self) -> bool:
        return getattr(provider_section("searxng"), "enabled", False) is True and bool(_url())

    def unavailable_reason(self) -> str:
        """Why the provider is unavailable ("" when it is available)."""
        if getattr(provider_section("searxng"), "enabled", False) is not True:
            return "not enabled (set tools.web.search.searxng.enabled to true)"
        if not _url():
            return "no instance URL (tools.web.search.searxng.url or SEARXNG_URL)"
        return ""

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        base = _url()
        if not base:
            return {
                "success": False,
                "error": "SearXNG URL is not set (tools.web.search.searxng.url or SEARXNG_URL)",
            }
        try:
            data = request_json(
                "SearXNG",
                "GET",
                f"{base}/search",
                params={"q": query, "format": "json", "pageno": 1},
                timeout=timeout("searxng", 15.0),
            )
        except ServiceError as exc:
            return {"success": False, "error": str(exc)}
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            return {"success": False, "error": "SearXNG answered without a results list"}

        def score(r: Any) -> float:
            try:
                return float(r.get("score") or 0)
            except (TypeError, ValueError):
                return 0.0

        ranked = sorted((r for r in results if isinstance(r, dict)), key=score, reverse=True)
        web = [
            {
                "title": str(r.get("title") or ""),
                "url": str(r.get("url") or ""),
                "description": str(r.get("content") or ""),
                "position": i + 1,
            }
            for i, r in enumerate(ranked[: max(int(limit), 1)])
        ]
        return {"success": True, "data": {"web": web}}

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "SearXNG",
            "badge": "free · self-hosted",
            "tag": "Metasearch through your own SearXNG instance.",
            "env_vars": [
                {"key": "SEARXNG_URL", "prompt": "SearXNG instance URL", "url": "https://docs.searxng.org/"},
            ],
        }


__all__ = ["SearXNGWebSearchProvider"]
