"""``felix.plugins``: the registry object plugins receive (plughost's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _plughost_felix import PluginRegistry


@dataclass(slots=True)
class PluginCronTask:
    name: str
    schedule: str = ""
    handler: Any = None


_REGISTRY = PluginRegistry("")


def get_registry() -> PluginRegistry:
    return _REGISTRY


__all__ = ["PluginRegistry", "PluginCronTask", "get_registry"]
