"""DuckDuckGo search through the third-party ``ddgs`` package (plughost compat).

Search only, no key.  ``ddgs`` is not part of plughost: the provider is
available when ``tools.web.search.ddgs.enabled`` is true *and* the package
is importable (``pip install ddgs`` into plughost's Python); otherwise it
says which is missing.  One search is capped at 30 s of wall-clock time
(the package's own timeout does not bound its retries).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from flowly.agent.tools.web_providers._config import provider_section
from flowly.agent.tools.web_providers.base import WebSearchProvider


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


_SEARCH_TIMEOUT_SECS = 30


def _ddgs_importable() -> bool:
    try:
        return importlib.util.find_spec("ddgs") is not None
    except (ImportError, ValueError):
        return False


def _run_ddgs_search(query: str, safe_limit: int) -> list[dict[str, Any]]:
    from ddgs import DDGS  # type: ignore[import-not-found]

    results: list[dict[str, Any]] = []
    with DDGS(timeout=10) as client:
        for i, hit in enumerate(client.text(query, max_results=safe_limit)):
            if i >= safe_limit:
                break
            results.append(
                {
                    "title": str(hit.get("title", "")),
                    "url": str(hit.get("href") or hit.get("url") or ""),
                    "description": str(hit.get("body", "")),
                    "position": i + 1,
                }
            )
    return results


class DDGSWebSearchProvider(WebSearchProvider):
    """DuckDuckGo search via ``ddgs``. No API key; rate limits are server-side."""

    @property
    def name(self) -> str:
        return "ddgs"

    @property
    def display_name(self) -> str:
        return "DuckDuckGo (ddgs)"

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return False

    def is_available(self) -> bool:
        return not self.unavailable_reason()

    def unavailable_reason(self) -> str:
        """Why the provider is unavailable ("" when it is available)."""
        if getattr(provider_section("ddgs"), "enabled", False) is not True:
            return "not enabled (set tools.web.search.ddgs.enabled to true)"
        if not _ddgs_importable():
            return "the ddgs package is not installed (pip install ddgs into plughost's Python)"
        return ""

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        if not _ddgs_importable():
            return {"success": False, "error": "ddgs package is not installed — run `pip install ddgs`"}
        import concurrent.futures as _cf  # when a search runs, not with the backend

        safe_limit = max(1, int(limit))
        pool = _cf.ThreadPoolExecutor(max_workers=1)
        try:
            future = pool.submit(_run_ddgs_search, query, safe_limit)
            try:
                web = future.result(timeout=_SEARCH_TIMEOUT_SECS)
            except _cf.TimeoutError:
                _logger().warning("ddgs search timed out after %ss: %r", _SEARCH_TIMEOUT_SECS, query)
                return {
                    "success": False,
                    "error": (
                        f"DuckDuckGo search timed out after {_SEARCH_TIMEOUT_SECS}s — "
                        "it may be rate-limiting. Try again or switch provider."
                    ),
                }
        except Exception as exc:  # noqa: BLE001 - ddgs raises its own exceptions
            _logger().warning("ddgs search error: %s", exc)
            return {"success": False, "error": f"DuckDuckGo search failed: {exc}"}
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return {"success": True, "data": {"web": web}}

    def get_setup_schema(self) -> dict[str, Any]:
        return {
            "name": "DuckDuckGo (ddgs)",
            "badge": "free · no key",
            "tag": "Search via the ddgs package — no API key (pair with any extract provider).",
            "env_vars": [],
        }


__all__ = ["DDGSWebSearchProvider"]
