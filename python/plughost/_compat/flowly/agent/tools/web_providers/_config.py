"""Provider settings from plughost's ``config.json`` (plughost compat).

Providers read ``tools.web.search`` (and ``tools.web.search.<provider>``)
of the calling host's ``config.json``, with Flowly's key names: a setting
spelled ``api_key`` in Flowly's code is found as ``apiKey`` or ``api_key``.
Reading never raises: an unreadable file means "not configured" (the host
has already reported it when it started).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class Section:
    """A config mapping read by attribute: ``section.api_key`` finds
    ``apiKey`` or ``api_key``; a missing key raises ``AttributeError`` (so
    ``getattr(section, key, default)`` gives the default)."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        for key in (name, _camel(name)):
            if key in self._data:
                value = self._data[key]
                return Section(value) if isinstance(value, dict) else value
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"Section({self._data!r})"


def _home() -> Path:
    import sys

    import _plughost_runtime

    web = sys.modules.get("_plughost_web")
    home = (
        (web.HOME.get() if web is not None else None)
        or _plughost_runtime.caller_home()
        or _plughost_runtime.HOME
        or os.environ.get("PLUGHOST_HOME")
        or os.path.expanduser("~/.plughost")
    )
    return Path(home)


def pinned_home():
    """A context manager keeping the calling host's home for work handed to
    other threads (``asyncio.to_thread``): settings read there are the
    calling host's."""
    import _plughost_web

    return _plughost_web.pinned_home()


def web_search_config() -> Section | None:
    """The ``tools.web.search`` block, or None when absent or unreadable."""
    import json

    try:
        data = json.loads((_home() / "config.json").read_text(encoding="utf-8"))
        block = data["tools"]["web"]["search"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Section(block) if isinstance(block, dict) else None


def provider_section(name: str) -> Section | None:
    """The ``tools.web.search.<name>`` block, or None."""
    search = web_search_config()
    section = getattr(search, name, None) if search is not None else None
    return section if isinstance(section, Section) else None


def text_setting(section: Any, key: str, env: str = "") -> str:
    """``section.<key>`` as stripped text, else ``$env``, else ""."""
    value = getattr(section, key, "") if section is not None else ""
    text = value.strip() if isinstance(value, str) else ""
    if not text and env:
        text = os.environ.get(env, "").strip()
    return text


def base_url(name: str, default: str) -> str:
    """Where provider *name*'s service lives: ``tools.web.search.<name>.baseUrl``,
    else ``$<NAME>_BASE_URL``, else *default* (tests, proxies and
    self-hosted gateways point it elsewhere)."""
    url = text_setting(provider_section(name), "base_url", f"{name.upper()}_BASE_URL")
    return (url or default).rstrip("/")


def timeout(name: str, default: float) -> float:
    """``tools.web.search.<name>.timeout`` in seconds, else *default*."""
    value = getattr(provider_section(name), "timeout", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


__all__ = ["pinned_home", "web_search_config", "provider_section", "text_setting", "base_url", "timeout"]
