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

import asyncio
import os
from typing import Any

from flowly.agent.tools.web_providers._config import base_url, pinned_home, provider_section, text_setting, timeout
from flowly.agent.tools.web_providers._http import ServiceError, request_json
from flowly.agent.tools.web_providers.base import WebSearchProvider

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
    data = request_json(
        "Parallel",
        "POST",
        f"{base_url('parallel', _DEFAULT_BASE)}/v1beta/{endpoint}",
        body=body,
        headers={"x-api-key": key, "parallel-beta": _BETA},
        timeout=timeout("parallel", 60.0),
        credentials=_CREDENTIALS,
    )
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ServiceError("Parallel answered without a results list")
    return data


class ParallelWebSearchProvider(WebSearchProvider):
    """Parallel.ai search + async extract."""

    @property
    def name(self) -> str:
        return "parallel"

    @property
    def display_name(self) -> str:
        return "Parallel"

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return True

    def is_available(self) -> bool:
        return not self.unavailable_reason()

    def unavailable_reason(self) -> str:
        """Why the provider is unavailable ("" when it is available)."""
        if getattr(provider_section("parallel"), "enabled", False) is not True:
            return "not enabled (set tools.web.search.parallel.enabled to true)"
        if not _parallel_key():
            return "no API key (tools.web.search.parallel.apiKey or PARALLEL_API_KEY)"
        return ""

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
        except ValueError as exc:
            return {"success": False, "error": str(exc)}
        except ServiceError as exc:
            return {"success": False, "error": f"Parallel search failed: {exc}"}
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
        def failed(message: str) -> list[dict[str, Any]]:
            return [{"url": u, "title": "", "content": "", "error": message} for u in urls]

        try:
            with pinned_home():
                data = await asyncio.to_thread(_post, "extract", {"urls": list(urls), "full_content": True})
        except ValueError as exc:
            return failed(str(exc))
        except ServiceError as exc:
            return failed(f"Parallel extract failed: {exc}")
        documents: list[dict[str, Any]] = []
        for r in data["results"]:
            if not isinstance(r, dict):
                continue
            content = str(r.get("full_content") or "")
            if not content:
                content = "\n\n".join(str(e) for e in r.get("excerpts") or [])
            url = str(r.get("url") or "")
            title = str(r.get("title") or "")
            documents.append(
                {
                    "url": url,
                    "title": title,
                    "content": content,
                    "raw_content": content,
                    "metadata": {"sourceURL": url, "title": title},
                }
            )
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
