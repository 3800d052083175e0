"""Flowly's web tool helpers (plughost compat): the URL rule, page fetching
and result formatting that providers import (``from flowly.agent.tools.web
import _validate_url, _fetch_readable``).  They live in ``_plughost_web``,
which plughost's built-in ``web_search`` / ``web_extract`` tools use."""

from _plughost_web import (  # noqa: F401 - re-exported under Flowly's names
    USER_AGENT,
    _extract_relevant_passages,
    _fetch_readable,
    _format_search_results,
    _html_to_markdown,
    _normalize,
    _run_provider_extract,
    _run_provider_search,
    _strip_tags,
    _validate_url,
)
