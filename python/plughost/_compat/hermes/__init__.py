"""plughost's fallback finder for the Hermes core modules plugins import.

Appended to the end of ``sys.meta_path``: consulted only after every other
finder, so a real Hermes installation (a module of the same name anywhere on
``sys.path``) always wins and these modules never shadow it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

#: The Hermes home plugins see (set by the dialect before any plugin loads).
HERMES_HOME = ""

#: module name -> (source, is a package)
SOURCES: "dict[str, tuple[str, bool]]" = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, source: str) -> None:
        self._source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        origin = f"<plughost:{module.__name__}>"
        module.__file__ = origin
        code = compile(self._source, origin, "exec")
        exec(code, module.__dict__)


#: The context of the plugin whose ``register(ctx)`` is running (for
#: ``tools.registry.register``), else None.
_CURRENT = None


def current_context():
    return _CURRENT


class HermesCompatFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`SOURCES` for names no other finder found."""

    def find_spec(self, fullname, path=None, target=None):
        entry = SOURCES.get(fullname)
        if entry is None:
            return None
        # A submodule only under a compat parent: a real package of the same
        # name (a project's own ``agent`` or ``tools``) never gets ours.
        parent, _, _ = fullname.rpartition(".")
        if parent:
            owner = sys.modules.get(parent)
            if owner is None or not str(getattr(owner, "__file__", "")).startswith("<plughost:"):
                return None
        source, is_package = entry
        return importlib.util.spec_from_loader(
            fullname, _Loader(source), origin=f"<plughost:{fullname}>", is_package=is_package
        )


def install(sources: "dict[str, tuple[str, bool]]", hermes_home: str) -> None:
    """Register the compat sources and put the finder last on ``sys.meta_path`` (once)."""
    global HERMES_HOME
    SOURCES.update(sources)
    HERMES_HOME = hermes_home
    if not any(isinstance(f, HermesCompatFinder) for f in sys.meta_path):
        sys.meta_path.append(HermesCompatFinder())


# ---------------------------------------------------------------------------
# ctx.llm: Hermes's host-owned LLM facade (``agent.plugin_llm.PluginLlm``),
# backed by the model of the agent running plughost (``llm_complete``, added
# to this module by the dialect). plughost has no per-plugin trust config,
# so every override is refused, as Hermes refuses one without trust.
# ---------------------------------------------------------------------------

import asyncio as _asyncio
from dataclasses import dataclass as _dataclass, field as _field
from typing import Any as _Any, Dict as _Dict, Optional as _Optional


class PluginLlmTrustError(PermissionError):
    """Raised when a plugin attempts an LLM override without trust."""


@_dataclass
class PluginLlmUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: _Optional[float] = None


@_dataclass
class PluginLlmCompleteResult:
    text: str
    provider: str
    model: str
    agent_id: str
    usage: PluginLlmUsage = _field(default_factory=PluginLlmUsage)
    audit: _Dict[str, _Any] = _field(default_factory=dict)


def _usage(raw) -> PluginLlmUsage:
    raw = raw if isinstance(raw, dict) else {}

    def num(*keys):
        for k in keys:
            v = raw.get(k)
            if isinstance(v, (int, float)):
                return int(v)
        return 0

    inp = num("input_tokens", "prompt_tokens")
    out = num("output_tokens", "completion_tokens")
    return PluginLlmUsage(input_tokens=inp, output_tokens=out, total_tokens=num("total_tokens") or inp + out)


class PluginLlm:
    """``ctx.llm``: chat completions against the agent's model."""

    def __init__(self, *, plugin_id: str) -> None:
        self._plugin_id = plugin_id

    def _refuse_overrides(self, provider, model, agent_id, profile) -> None:
        pid = self._plugin_id
        for what, value in (("provider", provider), ("model", model), ("auth profile", profile)):
            if value:
                raise PluginLlmTrustError(
                    f"Plugin {pid!r} cannot override the {what} "
                    f"(plughost offers plugins only the agent's own model)."
                )
        if agent_id:
            raise PluginLlmTrustError(
                f"Plugin {pid!r} cannot run completions against a non-default agent id "
                f"(plughost offers plugins only the agent's own model)."
            )

    def complete(self, messages, *, provider=None, model=None, temperature=None, max_tokens=None,
                 timeout=None, agent_id=None, profile=None, purpose=None) -> PluginLlmCompleteResult:
        self._refuse_overrides(provider, model, agent_id, profile)
        text, full_model, usage = llm_complete(self._plugin_id, list(messages))  # noqa: F821
        prov, _, name = full_model.partition(":")
        return PluginLlmCompleteResult(
            text=text,
            provider=prov if name else "auto",
            model=name or full_model,
            agent_id="default",
            usage=_usage(usage),
            audit={"plugin_id": self._plugin_id, "purpose": purpose or "", "profile": ""},
        )

    async def acomplete(self, messages, **kwargs) -> PluginLlmCompleteResult:
        return await _asyncio.to_thread(self.complete, messages, **kwargs)


def run_cli_command(name, help, description, setup_fn, handler_fn, argv) -> int:
    """Run a plugin's ``register_cli_command`` command as Hermes's CLI does:
    its own argparse parser, ``setup_fn(parser)``, ``func`` default, ``func(args)``."""
    import argparse
    import inspect

    parser = argparse.ArgumentParser(prog=f"plughost hermes {name}", description=description or help)
    setup_fn(parser)
    if handler_fn is not None:
        parser.set_defaults(func=handler_fn)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:  # argparse's usage errors and --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        result = func(args)
        if inspect.isawaitable(result):
            result = _asyncio.run(result)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def register_web_provider(provider) -> None:
    """Hand a Hermes ``WebSearchProvider`` to the web provider registry the
    ``web_search`` / ``web_extract`` tools use (Flowly's, real or compat).
    Both interfaces are the same contract (``name``, ``is_available``,
    ``supports_search``/``supports_extract``, ``search``, ``extract``); a
    Hermes provider is wrapped so the registry's type check accepts it."""
    from flowly.agent.tools.web_providers.base import WebSearchProvider as _Base
    from flowly.agent.tools.web_providers.registry import register_provider

    if isinstance(provider, _Base):
        register_provider(provider)
        return

    class HermesWebProvider(_Base):
        def __init__(self, inner) -> None:
            self._inner = inner

        @property
        def name(self) -> str:
            return self._inner.name

        @property
        def display_name(self) -> str:
            return getattr(self._inner, "display_name", None) or self._inner.name

        def is_available(self) -> bool:
            return bool(self._inner.is_available())

        def supports_search(self) -> bool:
            return bool(self._inner.supports_search())

        def supports_extract(self) -> bool:
            return bool(self._inner.supports_extract())

        def search(self, query: str, limit: int = 5):
            return self._inner.search(query, limit)

        def extract(self, urls, **kwargs):
            return self._inner.extract(urls, **kwargs)

    register_provider(HermesWebProvider(provider))
