"""Exa: neural search and content extraction (plughost compat).

The key is ``tools.web.search.exa.apiKey``, else ``$EXA_API_KEY``, sent as
``x-api-key`` to Exa's REST API: ``POST /search`` (with highlights as the
description) and ``POST /contents`` (page text).  Available when
``tools.web.search.exa.enabled`` is true and a key is set.  The service
lives at ``https://api.exa.ai`` unless ``tools.web.search.exa.baseUrl`` or
``$EXA_BASE_URL`` says otherwise.  Standard library only (no ``exa-py``).
"""

from __future__ import annotations

from typing import Any

from flowly.agent.tools.web_providers._config import provider_section, text_setting
from flowly.agent.tools.web_providers._http import ServiceError, post_json
from flowly.agent.tools.web_providers.base import ServiceProvider, document, failed_documents

_DEFAULT_BASE = "https://api.exa.ai"
_CREDENTIALS = "the Exa API key (tools.web.search.exa.apiKey or EXA_API_KEY)"


def _exa_key() -> str:
    return text_setting(provider_section("exa"), "api_key", "EXA_API_KEY")


def _post(endpoint: str, body: dict[str, Any]) -> Any:
    key = _exa_key()
    if not key:
        raise ValueError("EXA_API_KEY is not set")
    return post_json(
        "Exa",
        "exa",
        endpoint,
        body,
        default_base=_DEFAULT_BASE,
        default_timeout=30.0,
        headers={"x-api-key": key, "x-exa-integration": "flowly"},
        credentials=_CREDENTIALS,
    )


def _results(data: Any) -> list[dict[str, Any]]:
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ServiceError("Exa answered without a results list")
    return [r for r in results if isinstance(r, dict)]


class ExaWebSearchProvider(ServiceProvider):
    """Exa neural search + extract."""

    service = "Exa"

    @property
    def name(self) -> str:
        return "exa"

    def missing_credentials(self) -> str:
        return "" if _exa_key() else "no API key (tools.web.search.exa.apiKey or EXA_API_KEY)"

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        try:
            data = _post(
                "search",
                {"query": query, "numResults": max(int(limit), 1), "contents": {"highlights": True}},
            )
            results = _results(data)
        except (ValueError, ServiceError) as exc:
            return {"success": False, "error": self.failed("search", exc)}
        web = []
        for i, r in enumerate(results):
            highlights = r.get("highlights") or []
            web.append(
                {
                    "url": str(r.get("url") or ""),
                    "title": str(r.get("title") or ""),
                    "description": " ".join(str(h) for h in highlights) if isinstance(highlights, list) else "",
                    "position": i + 1,
                }
            )
        return {"success": True, "data": {"web": web}}

    def extract(self, urls: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        try:
            data = _post("contents", {"urls": list(urls), "text": True})
            results = _results(data)
        except (ValueError, ServiceError) as exc:
            return failed_documents(urls, self.failed("extract", exc))
        documents = [
            document(str(r.get("url") or ""), str(r.get("title") or ""), str(r.get("text") or "")) for r in results
        ]
        # Per-URL failures: {"id": url, "status": "error", "error": {"tag": ..., "httpStatusCode": ...}}.
        for status in data.get("statuses") or []:
            if isinstance(status, dict) and status.get("status") == "error":
                error = status.get("error")
                tag = error.get("tag") if isinstance(error, dict) else error
                code = error.get("httpStatusCode") if isinstance(error, dict) else None
                said = f"{tag or 'extraction failed'}" + (f" (HTTP {code})" if code else "")
                documents.append({"url": str(status.get("id") or ""), "title": "", "content": "", "error": said})
        return documents

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "Exa",
            "badge": "paid · semantic",
            "tag": "Neural/semantic web search with content extraction.",
            "env_vars": [
                {"key": "EXA_API_KEY", "prompt": "Exa API key", "url": "https://exa.ai"},
            ],
        }


__all__ = ["ExaWebSearchProvider"]
