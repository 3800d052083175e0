"""``gateway.session_context`` compat (plughost): session variables are
the process environment (plughost runs no gateway sessions)."""

from __future__ import annotations

import os


def get_session_env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)
