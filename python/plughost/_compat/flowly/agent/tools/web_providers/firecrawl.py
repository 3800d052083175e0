"""Firecrawl: search and JS-rendered page extraction (plughost compat).

Firecrawl's cloud with a key (``tools.web.search.firecrawl.apiKey``, else
``$FIRECRAWL_API_KEY``, sent as ``Authorization: Bearer``), or a
self-hosted instance (``tools.web.search.firecrawl.apiUrl``, else
``$FIRECRAWL_API_URL``; a key is then optional).  Uses the v2 REST API:
``POST /v2/search`` and ``POST /v2/scrape``.  Available when
``tools.web.search.firecrawl.enabled`` is true and a key or URL is set.
The cloud lives at ``https://api.firecrawl.dev`` unless the instance URL,
``tools.web.search.firecrawl.baseUrl`` or ``$FIRECRAWL_BASE_URL`` says
otherwise.  ``extract`` is ``async``: each URL is scraped in a worker
thread, and the page's final URL is checked again against the URL rule.
"""

from __future__ import annotations

from typing import Any

from flowly.agent.tools.web_providers._config import pinned_home, provider_section, text_setting
from flowly.agent.tools.web_providers._http import ServiceError, post_json
from flowly.agent.tools.web_providers.base import ServiceProvider, document, failed_documents

_DEFAULT_BASE = "https://api.firecrawl.dev"
_CREDENTIALS = "the Firecrawl API key (tools.web.search.firecrawl.apiKey or FIRECRAWL_API_KEY)"


def _firecrawl_config() -> tuple[str, str]:
    section = provider_section("firecrawl")
    api_key = text_setting(section, "api_key", "FIRECRAWL_API_KEY")
    api_url = text_setting(section, "api_url", "FIRECRAWL_API_URL").rstrip("/")
    return api_key, api_url


def _post(endpoint: str, body: dict[str, Any], wait: float) -> Any:
    api_key, api_url = _firecrawl_config()
    if not api_key and not api_url:
        raise ValueError("FIRECRAWL_API_KEY (cloud) or FIRECRAWL_API_URL (self-hosted) is not set")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    data = post_json(
        "Firecrawl",
        "firecrawl",
        f"v2/{endpoint}",
        body,
        default_base=_DEFAULT_BASE,
        default_timeout=wait,
        headers=headers,
        credentials=_CREDENTIALS,
        base=api_url,
    )
    if not isinstance(data, dict):
        raise ServiceError("Firecrawl answered with something other than a JSON object")
    if data.get("success") is False:
        raise ServiceError(f"Firecrawl reported a failure: {data.get('error') or 'no reason given'}")
    return data


def _search_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The web results of a search answer (``data.web``; older shapes too)."""
    inner = data.get("data")
    if isinstance(inner, list):
        return [r for r in inner if isinstance(r, dict)]
    for block in (inner, data):
        if isinstance(block, dict):
            for key in ("web", "results"):
                rows = block.get(key)
                if isinstance(rows, list):
                    return [r for r in rows if isinstance(r, dict)]
    return []


class FirecrawlWebSearchProvider(ServiceProvider):
    """Firecrawl search + extract (direct cloud or self-hosted)."""

    service = "Firecrawl"

    @property
    def name(self) -> str:
        return "firecrawl"

    def missing_credentials(self) -> str:
        api_key, api_url = _firecrawl_config()
        if not (api_key or api_url):
            return "no API key or instance URL (FIRECRAWL_API_KEY or FIRECRAWL_API_URL)"
        return ""

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        try:
            data = _post("search", {"query": query, "limit": max(int(limit), 1)}, 30.0)
        except (ValueError, ServiceError) as exc:
            return {"success": False, "error": self.failed("search", exc)}
        web = [
            {
                "title": str(r.get("title", "") or ""),
                "url": str(r.get("url", "") or ""),
                "description": str(r.get("description", "") or r.get("snippet", "") or ""),
                "position": i + 1,
            }
            for i, r in enumerate(_search_rows(data))
        ]
        return {"success": True, "data": {"web": web}}

    async def extract(self, urls: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        import asyncio

        from flowly.agent.tools.web import _validate_url

        fmt = kwargs.get("format")
        formats = ["markdown"] if fmt == "markdown" else (["html"] if fmt == "html" else ["markdown", "html"])
        api_key, api_url = _firecrawl_config()
        if not api_key and not api_url:
            return failed_documents(urls, "FIRECRAWL_API_KEY (cloud) or FIRECRAWL_API_URL (self-hosted) is not set")
        results: list[dict[str, Any]] = []
        for url in urls:
            try:
                with pinned_home():
                    data = await asyncio.to_thread(_post, "scrape", {"url": url, "formats": formats}, 60.0)
            except (ValueError, ServiceError) as exc:
                results.append({"url": url, "title": "", "content": "", "error": str(exc)})
                continue
            payload = data.get("data") if isinstance(data.get("data"), dict) else {}
            metadata = payload.get("metadata") if isinstance(payload.get("metadata"), dict) else {}
            title = str(metadata.get("title") or "")
            final_url = str(metadata.get("sourceURL") or url)
            ok, reason = _validate_url(final_url)
            if not ok:
                results.append({"url": final_url, "title": title, "content": "", "error": reason})
                continue
            content = payload.get("markdown") or payload.get("html") or ""
            results.append(document(final_url, title, content, metadata))
        return results

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "Firecrawl",
            "badge": "paid · best extract",
            "tag": "Full search + JS-rendered extraction; cloud key or self-hosted URL.",
            "env_vars": [
                {
                    "key": "FIRECRAWL_API_KEY",
                    "prompt": "Firecrawl API key (blank for self-hosted)",
                    "url": "https://docs.firecrawl.dev/introduction",
                },
            ],
        }


__all__ = ["FirecrawlWebSearchProvider"]
