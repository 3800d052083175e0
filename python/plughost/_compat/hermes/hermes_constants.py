"""``hermes_constants`` compat (plughost): the Hermes home, as Hermes resolves it.

Served only when no real ``hermes_constants`` is importable.  The home is a
context-local override, else the Hermes home plughost discovered the
plugins in (``$HERMES_HOME``, else ``~/.hermes``).
"""

from __future__ import annotations

import os
from contextvars import ContextVar, Token
from pathlib import Path

_UNSET = object()
_HERMES_HOME_OVERRIDE: "ContextVar[object]" = ContextVar("_HERMES_HOME_OVERRIDE", default=_UNSET)


def set_hermes_home_override(path) -> Token:
    """Set a context-local Hermes home override; returns its reset token."""
    return _HERMES_HOME_OVERRIDE.set(_UNSET if path is None else str(path))


def reset_hermes_home_override(token: Token) -> None:
    _HERMES_HOME_OVERRIDE.reset(token)


def get_hermes_home_override():
    value = _HERMES_HOME_OVERRIDE.get()
    return str(value) if value is not _UNSET and value else None


def get_process_hermes_home() -> Path:
    """The Hermes home of this process: what plughost discovered plugins in."""
    import _plughost_hermes

    if _plughost_hermes.HERMES_HOME:
        return Path(_plughost_hermes.HERMES_HOME)
    value = os.environ.get("HERMES_HOME", "").strip()
    return Path(value) if value else Path.home() / ".hermes"


def get_hermes_home() -> Path:
    """Hermes home: context-local override, else the process's Hermes home."""
    override = get_hermes_home_override()
    return Path(override) if override else get_process_hermes_home()


def display_hermes_home() -> str:
    """The Hermes home for messages, with the user's home shown as ``~``."""
    home = str(get_hermes_home())
    user = str(Path.home())
    return "~" + home[len(user) :] if home.startswith(user) else home
