"""Parallel: objective-tuned search and page extraction (plughost compat).

The key is ``tools.web.search.parallel.apiKey``, else ``$PARALLEL_API_KEY``,
sent as ``x-api-key`` to Parallel's Search and Extract APIs
(``POST /v1beta/search``, ``POST /v1beta/extract``, with the
``parallel-beta`` header).  The search mode is ``$PARALLEL_SEARCH_MODE``
(``fast``, ``one-shot`` or ``agentic``, the default).  Available when
``tools.web.search.parallel.enabled`` is true and a key is set.  The
service lives at ``https://api.parallel.ai`` unless
``tools.web.search.parallel.baseUrl`` or ``$PARALLEL_BASE_URL`` says
otherwise.  Search is sync, extract ``async`` (as Flowly's).
"""

from __future__ import annotations

import os
from typing import Any

from flowly.agent.tools.web_providers._config import pinned_home, provider_section, text_setting
from flowly.agent.tools.web_providers._http import ServiceError, post_json
from flowly.agent.tools.web_providers.base import ServiceProvider, document, failed_documents

_DEFAULT_BASE = "https://api.parallel.ai"
_BETA = "search-extract-2025-10-10"
_CREDENTIALS = "the Parallel API key (tools.web.search.parallel.apiKey or PARALLEL_API_KEY)"


def _parallel_key() -> str:
    return text_setting(provider_section("parallel"), "api_key", "PARALLEL_API_KEY")


def _resolve_mode() -> str:
    mode = os.getenv("PARALLEL_SEARCH_MODE", "agentic").lower().strip()
    return mode if mode in {"fast", "one-shot", "agentic"} else "agentic"


def _post(endpoint: str, body: dict[str, Any]) -> Any:
    key = _parallel_key()
    if not key:
        raise ValueError("PARALLEL_API_KEY is not set")
    data = post_json(
        "Parallel",
        "parallel",
        f"v1beta/{endpoint}",
        body,
        default_base=_DEFAULT_BASE,
        default_timeout=60.0,
        headers={"x-api-key": key, "parallel-beta": _BETA},
        credentials=_CREDENTIALS,
    )
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ServiceError("Parallel answered without a results list")
    return data


class ParallelWebSearchProvider(ServiceProvider):
    """Parallel.ai search + async extract."""

    service = "Parallel"

    @property
    def name(self) -> str:
        return "parallel"

    def missing_credentials(self) -> str:
        return "" if _parallel_key() else "no API key (tools.web.search.parallel.apiKey or PARALLEL_API_KEY)"

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        try:
            data = _post(
                "search",
                {
                    "objective": query,
                    "search_queries": [query],
                    "mode": _resolve_mode(),
                    "max_results": min(max(int(limit), 1), 20),
                },
            )
        except (ValueError, ServiceError) as exc:
            return {"success": False, "error": self.failed("search", exc)}
        web = []
        for i, r in enumerate(r for r in data["results"] if isinstance(r, dict)):
            excerpts = r.get("excerpts") or []
            web.append(
                {
                    "url": str(r.get("url") or ""),
                    "title": str(r.get("title") or ""),
                    "description": " ".join(str(e) for e in excerpts) if isinstance(excerpts, list) else "",
                    "position": i + 1,
                }
            )
        return {"success": True, "data": {"web": web}}

    async def extract(self, urls: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        import asyncio

        try:
            with pinned_home():
                data = await asyncio.to_thread(_post, "extract", {"urls": list(urls), "full_content": True})
        except (ValueError, ServiceError) as exc:
            return failed_documents(urls, self.failed("extract", exc))
        documents: list[dict[str, Any]] = []
        for r in data["results"]:
            if not isinstance(r, dict):
                continue
            content = str(r.get("full_content") or "")
            if not content:
                content = "\n\n".join(str(e) for e in r.get("excerpts") or [])
            documents.append(document(str(r.get("url") or ""), str(r.get("title") or ""), content))
        for error in data.get("errors") or []:
            if isinstance(error, dict):
                documents.append(
                    {
                        "url": str(error.get("url") or ""),
                        "title": "",
                        "content": "",
                        "error": error.get("content") or error.get("error_type") or "extraction failed",
                    }
                )
        return documents

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "Parallel",
            "badge": "paid · search + extract",
            "tag": "Objective-tuned search + parallel page extraction.",
            "env_vars": [
                {"key": "PARALLEL_API_KEY", "prompt": "Parallel API key", "url": "https://parallel.ai"},
            ],
        }


__all__ = ["ParallelWebSearchProvider"]
