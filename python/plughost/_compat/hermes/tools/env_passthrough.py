"""``tools.env_passthrough`` compat (plughost): Hermes's allowlist of
environment variables a skill (``required_environment_variables``) or
``terminal.env_passthrough`` in ``config.yaml`` lets through to sandboxed
children.

The allowlist is kept as Hermes keeps it (per ``contextvars`` context, plus
the config's list, Hermes's provider credentials refused). plughost's
``exec`` does not strip the environment, so every variable already reaches
the commands it runs: the list is what a plugin reads back, not a gate.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Iterable

logger = logging.getLogger(__name__)

_allowed_env_vars_var: "ContextVar[set]" = ContextVar("_allowed_env_vars")


def _get_allowed() -> set:
    try:
        return _allowed_env_vars_var.get()
    except LookupError:
        allowed: set = set()
        _allowed_env_vars_var.set(allowed)
        return allowed


def _is_hermes_provider_credential(name: str) -> bool:
    """Hermes's own provider credentials (and its internal secrets) never pass."""
    from hermes_cli.config import _ENV_KEYS

    upper = name.upper()
    return (upper in _ENV_KEYS
            or (upper.startswith("AUXILIARY_") and upper.endswith(("_API_KEY", "_BASE_URL")))
            or upper.startswith("GATEWAY_RELAY_"))


def _accepted(names, refusal: str):
    for name in names:
        if not name:
            continue
        if _is_hermes_provider_credential(name):
            logger.warning(refusal, name)
            continue
        yield name


def register_env_passthrough(var_names: Iterable[str]) -> None:
    """Allow these names through (a skill's ``required_environment_variables``)."""
    for name in _accepted((str(n).strip() for n in var_names),
                          "env passthrough: refusing to register Hermes provider credential %r"):
        _get_allowed().add(name)
        logger.debug("env passthrough: registered %s", name)


def _config_passthrough() -> frozenset:
    from hermes_cli.config import cfg_get, read_raw_config

    try:
        items = cfg_get(read_raw_config(), "terminal", "env_passthrough")
    except Exception as exc:  # an unreadable config.yaml allows nothing more
        logger.debug("Could not read terminal.env_passthrough from config: %s", exc)
        return frozenset()
    items = items if isinstance(items, list) else ()
    return frozenset(_accepted(
        (i.strip() for i in items if isinstance(i, str)),
        "env passthrough: refusing to register Hermes provider credential %r from config.yaml"))


def is_env_passthrough(var_name: str) -> bool:
    return ((var_name in _get_allowed() or var_name in _config_passthrough())
            and not _is_hermes_provider_credential(var_name))


def get_all_passthrough() -> frozenset:
    return frozenset(n for n in frozenset(_get_allowed()) | _config_passthrough()
                     if not _is_hermes_provider_credential(n))


def resolve_passthrough_value(name: str, fallback: "str | None" = None) -> "str | None":
    """plughost has no profile secret scopes: the caller's value."""
    return fallback


def scoped_passthrough_additions(present: Iterable[str]) -> dict:
    """No profile secret scope is ever bound in plughost: nothing to add."""
    return {}


def clear_env_passthrough() -> None:
    _get_allowed().clear()
