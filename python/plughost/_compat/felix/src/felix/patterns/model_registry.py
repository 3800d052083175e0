"""Felix's one model registry: ``register_model_provider(name, factory)``; a
provider registered while a plugin loads is plughost's ``--model NAME:MODEL``."""

from __future__ import annotations

_REGISTERED: dict = {}


def register_model_provider(name, factory=None, *args, **kwargs):
    _REGISTERED[name] = factory
    return factory


def registered_names() -> list:
    return sorted(_REGISTERED)
