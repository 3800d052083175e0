"""Hermes's ``providers`` registry as plughost serves it. A model-provider
plugin calls ``register_provider(ProviderProfile(...))`` when it is
imported; plughost reads the profiles registered while each plugin loaded
and offers them as models (``--model NAME:MODEL``)."""

from __future__ import annotations

from providers.base import ProviderProfile

_REGISTRY: dict = {}
_ALIASES: dict = {}


def register_provider(profile: ProviderProfile) -> None:
    """Register ``profile`` by name and aliases; a later one of the same name replaces it."""
    name = getattr(profile, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ValueError("register_provider: the profile needs a non-empty name")
    _REGISTRY[name] = profile
    for alias in getattr(profile, "aliases", ()) or ():
        _ALIASES[alias] = name


def get_provider_profile(name: str):
    canonical = _ALIASES.get(name, name)
    return _REGISTRY.get(canonical)


def list_providers() -> list:
    seen, out = set(), []
    for profile in _REGISTRY.values():
        if id(profile) not in seen:
            seen.add(id(profile))
            out.append(profile)
    return out


def provider_source(name: str):
    return "user" if get_provider_profile(name) is not None else None
