"""``tools.xai_http`` compat (plughost): Hermes's helpers for direct xAI
HTTP calls (``tools/xai_http.py``) that xAI plugins import — the
User-Agent they send and where their key comes from.

plughost has no xAI OAuth credential pool: the credentials are
``XAI_API_KEY`` (``$HERMES_HOME/.env`` first, then the environment) and
``XAI_BASE_URL``, which is what Hermes falls back to without one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional


def hermes_xai_user_agent() -> str:
    """The User-Agent of Hermes's xAI calls: ``Hermes-Agent/<version>``."""
    try:
        from hermes_cli import __version__  # type: ignore[attr-defined]
    except Exception:
        __version__ = "unknown"
    return f"Hermes-Agent/{__version__}"


def get_env_value(name: str, default: Optional[str] = None) -> Optional[str]:
    """``name`` from ``$HERMES_HOME/.env`` first, then the environment."""
    try:
        from hermes_cli.config import get_env_value as hermes_get_env_value

        value = hermes_get_env_value(name)
        if value is not None:
            return value
    except Exception:
        pass
    return os.environ.get(name, default)


def has_xai_credentials() -> bool:
    """Whether xAI credentials are likely there (no network, no refresh):
    ``XAI_API_KEY``, or an xAI OAuth token in ``$HERMES_HOME/auth.json``."""
    if os.environ.get("XAI_API_KEY", "").strip():
        return True
    try:
        from hermes_constants import get_hermes_home

        auth_path = get_hermes_home() / "auth.json"
        if not auth_path.exists():
            return False
        store = json.loads(auth_path.read_text(encoding="utf-8"))
        providers = store.get("providers") if isinstance(store, dict) else None
        state = providers.get("xai-oauth") if isinstance(providers, dict) else None
        tokens = state.get("tokens") if isinstance(state, dict) else None
        token = tokens.get("access_token") if isinstance(tokens, dict) else None
        if str(token or "").strip():
            return True
        pool = store.get("credential_pool") if isinstance(store, dict) else None
        entries = pool.get("xai-oauth") if isinstance(pool, dict) else None
        return isinstance(entries, list) and any(
            isinstance(e, dict) and str(e.get("access_token", "") or "").strip() for e in entries
        )
    except Exception:
        return False


def resolve_xai_http_credentials(*, force_refresh: bool = False,
                                 api_key_hint: Optional[str] = None) -> Dict[str, Any]:
    """Bearer credentials for direct xAI endpoints: ``XAI_API_KEY`` and
    ``XAI_BASE_URL`` (default ``https://api.x.ai/v1``), as Hermes resolves
    them without an OAuth pool (``force_refresh`` and ``api_key_hint`` only
    matter to one)."""
    api_key = str(get_env_value("XAI_API_KEY") or "").strip()
    base_url = str(get_env_value("XAI_BASE_URL") or "https://api.x.ai/v1").strip().rstrip("/")
    return {"provider": "xai", "api_key": api_key, "base_url": base_url}
