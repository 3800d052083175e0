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
# `typing` only for annotations (strings here): importing it costs
# milliseconds at every start that loads a web backend.
TYPE_CHECKING = False
if TYPE_CHECKING:
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


#: ``config.json`` as last parsed, per path: ``(path, (inode, size, mtime),
#: data)``. Every provider's availability check reads its settings, so one
#: check of eight backends read and parsed the file sixteen times; now it
#: costs a ``stat`` each while the file is unchanged.
_parsed: "dict[str, tuple[tuple[int, int, int], Any]]" = {}


def _config_data(path: Path) -> Any:
    import json

    key = str(path)
    st = os.stat(key)
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = _parsed.get(key)
    if seen is not None and seen[0] == stamp:
        return seen[1]
    with open(key, encoding="utf-8") as f:
        data = json.loads(f.read())
    if len(_parsed) > 64:  # homes come and go (tests): keep it small
        _parsed.clear()
    _parsed[key] = (stamp, data)
    return data


def web_search_config() -> Section | None:
    """The ``tools.web.search`` block, or None when absent or unreadable."""
    try:
        block = _config_data(_home() / "config.json")["tools"]["web"]["search"]
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
