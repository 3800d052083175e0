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

from flowly.agent.tools.web_providers._config import base_url, provider_section, text_setting, timeout
from flowly.agent.tools.web_providers._http import ServiceError, request_json
from flowly.agent.tools.web_providers.base import WebSearchProvider

_DEFAULT_BASE = "https://api.tavily.com"
_CREDENTIALS = "the Tavily API key (tools.web.search.tavily.apiKey or TAVILY_API_KEY)"


def _key() -> str:
    return text_setting(provider_section("tavily"), "api_key", "TAVILY_API_KEY")


def _post(endpoint: str, body: dict[str, Any]) -> Any:
    key = _key()
    if not key:
        raise ServiceError("TAVILY_API_KEY is not set (tools.web.search.tavily.apiKey or TAVILY_API_KEY)")
    return request_json(
        "Tavily",
        "POST",
        f"{base_url('tavily', _DEFAULT_BASE)}/{endpoint}",
        body=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout("tavily", 60.0),
        credentials=_CREDENTIALS,
    )


class TavilyWebSearchProvider(WebSearchProvider):
    """Tavily search + extract."""

    @property
    def name(self) -> str:
        return "tavily"

    @property
    def display_name(self) -> str:
        return "Tavily"

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return True

    def is_available(self) -> bool:
        return getattr(provider_section("tavily"), "enabled", False) is True and bool(_key())

    def unavailable_reason(self) -> str:
        """Why the provider is unavailable ("" when it is available)."""
        if getattr(provider_section("tavily"), "enabled", False) is not True:
            return "not enabled (set tools.web.search.tavily.enabled to true)"
        if not _key():
            return "no API key (tools.web.search.tavily.apiKey or TAVILY_API_KEY)"
        return ""

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
            return {"success": False, "error": f"Tavily search failed: {exc}"}
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
        def failed(message: str) -> list[dict[str, Any]]:
            return [{"url": u, "title": "", "content": "", "error": message} for u in urls]

        try:
            data = _post("extract", {"urls": list(urls), "include_images": False})
        except ServiceError as exc:
            return failed(f"Tavily extract failed: {exc}")
        if not isinstance(data, dict):
            return failed("Tavily extract failed: the answer is not a JSON object")
        documents: list[dict[str, Any]] = []
        for r in data.get("results") or []:
            if not isinstance(r, dict):
                continue
            url = str(r.get("url") or "")
            title = str(r.get("title") or "")
            content = str(r.get("raw_content") or r.get("content") or "")
            documents.append(
                {
                    "url": url,
                    "title": title,
                    "content": content,
                    "raw_content": content,
                    "metadata": {"sourceURL": url, "title": title},
                }
            )
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
