"""The web search/extract provider interface (plughost compat).

The ``web_search`` / ``web_extract`` tools hand each call to the active
:class:`WebSearchProvider`.  Shapes every provider answers with:

Search::

    {"success": True, "data": {"web": [
        {"title": str, "url": str, "description": str, "position": int}, ...]}}

Extract (a list, one entry per document)::

    [{"url": str, "title": str, "content": str, "raw_content": str,
      "metadata": dict}, ...]

Failures::

    search  -> {"success": False, "error": str}
    extract -> [{"url": str, "title": "", "content": "", "error": str}, ...]
"""

from __future__ import annotations

import abc
from typing import Any


class WebSearchProvider(abc.ABC):
    """A web search and/or extract backend.

    Implement :attr:`name`, :meth:`is_available` and :meth:`search` and/or
    :meth:`extract` (either may be ``async def``), and say which with
    :meth:`supports_search` / :meth:`supports_extract`.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Short stable id used in the ``backend`` / ``searchBackend`` /
        ``extractBackend`` settings (``brave``, ``searxng``, ...)."""

    @property
    def display_name(self) -> str:
        """Label for people; :attr:`name` unless overridden."""
        return self.name

    @abc.abstractmethod
    def is_available(self) -> bool:
        """Whether the provider can serve calls now (key or URL set).

        Cheap and without network access: it runs on every resolution.
        """

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return False

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        raise NotImplementedError(
            f"{self.name} does not support search (override supports_search)"
        )

    def extract(self, urls: list[str], **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{self.name} does not support extract (override supports_extract)"
        )

    def get_setup_schema(self) -> dict[str, Any]:
        """Metadata for setup screens: name, badge, tag, env_vars."""
        return {"name": self.display_name, "badge": "", "tag": "", "env_vars": []}


__all__ = ["WebSearchProvider"]
