"""``felix.plugins``: the registry object plugins receive (plughost's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from _plughost_felix import PluginRegistry

CronRunner = Callable[..., Awaitable[None]]


@dataclass
class PluginCronTask:
    """A background job of a plugin (its ``cron_tasks``): ``plughost serve``
    awaits ``run()`` once a minute, as Felix's worker does, as the task
    ``plugin_<name>``; ``plughost cron run plugin_<name>`` runs it now."""

    name: str
    run: CronRunner


_REGISTRY = PluginRegistry("")


def get_registry() -> PluginRegistry:
    return _REGISTRY


__all__ = ["PluginRegistry", "PluginCronTask", "get_registry"]
