"""Collect points: a plugin asks a question another plugin answers.

``host.collect(point, payload=None)`` returns an :class:`Answer` per provider
that declared something; ``host.provide(point, fn, provider=...)`` registers
an answerer. Pull at use time; ``None`` means nothing to declare; order is
not a contract; failures and awaitable answers are logged and skipped.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, NamedTuple

log = logging.getLogger("plughost.codumentor")

#: The blessed points plughost documents.
REPO_AGENT_MANAGED = "repo.agent_managed"


class Answer(NamedTuple):
    provider: str
    value: Any


class PluginHost:
    """The host facade plugins get through ``set_plugin_host`` and ``ctx["plugin_host"]``."""

    def __init__(self) -> None:
        self._plugins: "list[tuple[str, Any]]" = []
        self._provided: "list[tuple[str, Any, str]]" = []

    def add(self, key: str, plugin: Any) -> None:
        self._plugins.append((key, plugin))

    def provide(self, point: str, fn, provider: str = "label") -> None:
        if not callable(fn):
            raise TypeError(f"provide({point!r}): fn must be callable")
        self._provided.append((point, fn, provider))

    def _providers(self, point):
        for key, plugin in self._plugins:
            declare = getattr(plugin, "collect_providers", None)
            if declare is None:
                continue
            try:
                table = declare() or {}
                fn = table.get(point)
            except Exception as exc:
                log.warning("plugin '%s': collect_providers() raised %s: %s", key, type(exc).__name__, exc)
                continue
            if fn is None:
                continue
            if not callable(fn):
                log.warning("plugin '%s' declares a non-callable provider for %r; skipped", key, point)
                continue
            yield key, fn
        for p, fn, provider in self._provided:
            if p == point:
                yield provider, fn

    def collect(self, point: str, payload=None) -> "list[Answer]":
        answers = []
        for provider, fn in self._providers(point):
            try:
                value = fn(payload if payload is not None else {})
            except Exception as exc:
                log.warning("collect point %r: provider '%s' raised %s: %s", point, provider, type(exc).__name__, exc)
                continue
            if inspect.isawaitable(value):
                if hasattr(value, "close"):
                    value.close()
                log.warning("collect point %r: provider '%s' returned an awaitable; providers are synchronous, dropped", point, provider)
                continue
            if value is None:
                continue
            answers.append(Answer(provider, value))
        return answers
