"""``gateway.platforms._shared`` compat (plughost): helpers Hermes's plugin
adapters share (ports, secrets from the environment, env > YAML seeding)."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

logger = logging.getLogger(__name__)


def coerce_port(value: Any, default: int) -> int:
    try:
        port = int(str(value).strip())
    except (TypeError, ValueError):
        return default
    return port if 0 < port < 65536 else default


def get_scoped_secret(name: str, default: Optional[str] = None) -> Optional[str]:
    """The environment's ``name`` (plughost has one profile)."""
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def seed_extra_from_env(extra: dict, mapping: dict) -> dict:
    """``extra[key] = $ENV`` for each ``{ENV: key}`` the environment sets."""
    for env, key in (mapping or {}).items():
        value = get_scoped_secret(env)
        if value is not None:
            extra[key] = value
    return extra


def apply_yaml_bridge(yaml_cfg: dict, mapping: dict) -> dict:
    """Write ``{yaml_key: ENV}`` values into the environment where unset (env > YAML)."""
    out = {}
    for key, env in (mapping or {}).items():
        if key in (yaml_cfg or {}) and not os.getenv(env):
            os.environ[env] = str(yaml_cfg[key])
            out[key] = yaml_cfg[key]
    return out


async def send_error(adapter, chat_id: str, message: str, **kwargs):
    """Send ``message`` as an error notice through ``adapter``."""
    try:
        return await adapter.send(chat_id, message, **kwargs)
    except Exception as e:  # never raise from an error path
        logger.warning("[%s] could not send an error notice: %s", getattr(adapter, "name", "?"), e)
        return None
