"""Open registry (accepted, never used by plughost: its selecting configuration does not exist here)."""

from __future__ import annotations

_REGISTERED: dict = {}


def register_checkpointer(name, factory=None, *args, **kwargs):
    _REGISTERED[name] = factory
    return factory


def registered_names() -> list:
    return sorted(_REGISTERED)
