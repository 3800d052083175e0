"""Tavily: search and extract (plughost compat).

The key is ``tools.web.search.tavily.apiKey``, else ``$TAVILY_API_KEY``,
sent as ``Authorization: Bearer <key>`` to ``POST /search`` and
``POST /extract``.  Available when ``tools.web.search.tavily.enabled`` is
true and a key is set.  The service lives at ``https://api.tavily.com``
unless ``tools.web.search.tavily.baseUrl`` or ``$TAVILY_BASE_URL`` says
otherwise.
"""

from __future__ import annotations

from typing import Any

from flowly.agent.tools.web_providers._config import provider_section, text_setting
from flowly.agent.tools.web_providers._http import ServiceError, post_json
from flowly.agent.tools.web_providers.base import ServiceProvider, document, failed_documents

_DEFAULT_BASE = "https://api.tavily.com"
_CREDENTIALS = "the Tavily API key (tools.web.search.tavily.apiKey or TAVILY_API_KEY)"


def _key() -> str:
    return text_setting(provider_section("tavily"), "api_key", "TAVILY_API_KEY")


def _post(endpoint: str, body: dict[str, Any]) -> Any:
    key = _key()
    if not key:
        raise ServiceError("TAVILY_API_KEY is not set (tools.web.search.tavily.apiKey or TAVILY_API_KEY)")
    return post_json(
        "Tavily",
        "tavily",
        endpoint,
        body,
        default_base=_DEFAULT_BASE,
        default_timeout=60.0,
        headers={"Authorization": f"Bearer {key}"},
        credentials=_CREDENTIALS,
    )


class TavilyWebSearchProvider(ServiceProvider):
    """Tavily search + extract."""

    service = "Tavily"

    @property
    def name(self) -> str:
        return "tavily"

    def missing_credentials(self) -> str:
        return "" if _key() else "no API key (tools.web.search.tavily.apiKey or TAVILY_API_KEY)"

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        try:
            data = _post(
                "search",
                {
                    "query": query,
                    "max_results": min(max(int(limit), 1), 20),
                    "include_raw_content": False,
                    "include_images": False,
                },
            )
        except ServiceError as exc:
            return {"success": False, "error": self.failed("search", exc)}
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            return {"success": False, "error": "Tavily search failed: the answer has no results list"}
        web = [
            {
                "title": str(r.get("title") or ""),
                "url": str(r.get("url") or ""),
                "description": str(r.get("content") or ""),
                "position": i + 1,
            }
            for i, r in enumerate(r for r in results if isinstance(r, dict))
        ]
        return {"success": True, "data": {"web": web}}

    def extract(self, urls: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        try:
            data = _post("extract", {"urls": list(urls), "include_images": False})
        except ServiceError as exc:
            return failed_documents(urls, self.failed("extract", exc))
        if not isinstance(data, dict):
            return failed_documents(urls, "Tavily extract failed: the answer is not a JSON object")
        documents: list[dict[str, Any]] = []
        for r in data.get("results") or []:
            if not isinstance(r, dict):
                continue
            content = str(r.get("raw_content") or r.get("content") or "")
            documents.append(document(str(r.get("url") or ""), str(r.get("title") or ""), content))
        for r in data.get("failed_results") or []:
            if isinstance(r, dict):
                documents.append(
                    {
                        "url": str(r.get("url") or ""),
                        "title": "",
                        "content": "",
                        "error": str(r.get("error") or "extraction failed"),
                    }
                )
        return documents

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "Tavily",
            "badge": "paid · search + extract",
            "tag": "Search and page extraction in one API.",
            "env_vars": [
                {"key": "TAVILY_API_KEY", "prompt": "Tavily API key", "url": "https://app.tavily.com/home"},
            ],
        }


__all__ = ["TavilyWebSearchProvider"]
