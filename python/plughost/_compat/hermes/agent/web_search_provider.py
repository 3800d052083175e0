"""``agent.web_search_provider`` compat (plughost): Hermes's web search/extract
provider base.  Providers plugins register join the registry plughost's
``web_search`` / ``web_extract`` tools use.

Response shapes::

    search:  {"success": True, "data": {"web": [{"title", "url", "description", "position"}, ...]}}
    extract: [{"url", "title", "content", "raw_content", "metadata"}, ...]
    failure: {"success": False, "error": str}
"""

from __future__ import annotations

import abc
import os
from typing import Any, Dict, List


def get_provider_env(name: str) -> str:
    """The stripped value of environment variable ``name``, or ``""``."""
    return (os.getenv(name, "") or "").strip()


class WebSearchProvider(abc.ABC):
    """A web search/extract backend: implement ``name``, :meth:`is_available`
    and at least one of :meth:`search` / :meth:`extract`."""

    name: str = ""

    @abc.abstractmethod
    def is_available(self) -> bool:
        """True when this provider can serve calls (cheap, no network)."""

    def supports_search(self) -> bool:
        return True

    def is_keyless_available(self) -> bool:
        return False

    def supports_extract(self) -> bool:
        return False

    def search(self, query: str, limit: int = 5) -> Dict[str, Any]:
        raise NotImplementedError(f"{self.name} does not support search (override supports_search)")

    def extract(self, urls: List[str], **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.name} does not support extract (override supports_extract)")
