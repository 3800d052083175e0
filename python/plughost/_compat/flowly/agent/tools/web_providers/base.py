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
# `typing` only for annotations (strings here): importing it costs
# milliseconds at every start that loads a web backend.
TYPE_CHECKING = False
if TYPE_CHECKING:
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


def failed_documents(urls: list[str], message: str) -> list[dict[str, Any]]:
    """An extract that failed as a whole: one failure entry per URL."""
    return [{"url": u, "title": "", "content": "", "error": message} for u in urls]


def document(url: str, title: str, content: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """One extracted document; *metadata* defaults to its URL and title."""
    return {
        "url": url,
        "title": title,
        "content": content,
        "raw_content": content,
        "metadata": {"sourceURL": url, "title": title} if metadata is None else metadata,
    }


class ServiceProvider(WebSearchProvider):
    """A search + extract backend on one paid web service (Exa, Parallel,
    Tavily, Firecrawl): switched on by ``tools.web.search.<name>.enabled``
    and usable once its credentials are set.  Subclasses name the service
    (:attr:`service`, also the display name) and say what credential is
    missing (:meth:`missing_credentials`)."""

    #: The service's name in messages and setup screens ("Exa").
    service = ""

    @property
    def display_name(self) -> str:
        return self.service

    def supports_search(self) -> bool:
        return True

    def supports_extract(self) -> bool:
        return True

    def is_available(self) -> bool:
        return not self.unavailable_reason()

    def unavailable_reason(self) -> str:
        """Why the provider is unavailable ("" when it is available)."""
        from flowly.agent.tools.web_providers._config import provider_section

        if getattr(provider_section(self.name), "enabled", False) is not True:
            return f"not enabled (set tools.web.search.{self.name}.enabled to true)"
        return self.missing_credentials()

    @abc.abstractmethod
    def missing_credentials(self) -> str:
        """Which credential is missing, for people ("" when all are set)."""

    def failed(self, operation: str, exc: Exception) -> str:
        """A failed call's message: a :class:`ServiceError` names the service
        and *operation* (``search``/``extract``); a set-up problem
        (``ValueError``: no key) is said as it is."""
        from flowly.agent.tools.web_providers._http import ServiceError

        if isinstance(exc, ServiceError):
            return f"{self.service} {operation} failed: {exc}"
        return str(exc)


__all__ = ["WebSearchProvider", "ServiceProvider", "document", "failed_documents"]


class DeferredProvider(WebSearchProvider):
    """plughost: a provider whose module is imported when it is first used.

    A host registers every bundled web backend at start-up, yet most runs
    never search: this stands in for the provider class ``cls`` of module
    ``module`` under its fixed :attr:`name`, and everything else (its
    availability, capabilities, ``search`` and ``extract``, which are the
    real bound methods, so ``async def`` ones stay recognisable) imports
    the module and asks the real provider, made once with no arguments.
    """

    def __init__(self, name: str, module: str, cls: str) -> None:
        self._name, self._module, self._cls = name, module, cls
        self._real: WebSearchProvider | None = None

    @property
    def name(self) -> str:
        return self._name

    def provider(self) -> WebSearchProvider:
        """The real provider (imported and made on first call)."""
        if self._real is None:
            import importlib

            self._real = getattr(importlib.import_module(self._module), self._cls)()
        return self._real

    @property
    def display_name(self) -> str:  # type: ignore[override]
        return self.provider().display_name

    @property
    def is_available(self):  # type: ignore[override]
        return self.provider().is_available

    @property
    def supports_search(self):  # type: ignore[override]
        return self.provider().supports_search

    @property
    def supports_extract(self):  # type: ignore[override]
        return self.provider().supports_extract

    @property
    def search(self):  # type: ignore[override]
        return self.provider().search

    @property
    def extract(self):  # type: ignore[override]
        return self.provider().extract

    @property
    def get_setup_schema(self):  # type: ignore[override]
        return self.provider().get_setup_schema

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.provider(), attr)

    def __repr__(self) -> str:
        return f"<deferred web provider {self._name!r} ({self._module}.{self._cls})>"
