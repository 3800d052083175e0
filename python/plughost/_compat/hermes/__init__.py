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
# backed by the model of the agent running plughost (``llm_complete``,
# ``check_schema`` and ``schema_problem``, added to this module by the
# dialect; schemas are checked by plughost's own validator, so a schema is
# always enforced, where Hermes skips the check without ``jsonschema``, and
# a schema that is not one is refused before the model is asked). plughost
# has no per-plugin trust config, so every override is refused, as Hermes
# refuses one without trust. An image block without bytes or a URL is
# refused too (Hermes would send an empty image).
# ---------------------------------------------------------------------------

import asyncio as _asyncio
import inspect as _inspect
import base64 as _base64
import json as _json
import re as _re
from dataclasses import dataclass as _dataclass, field as _field
from typing import Any as _Any, Dict as _Dict, Optional as _Optional


class PluginLlmTrustError(PermissionError):
    """Raised when a plugin attempts an LLM override without trust."""


@_dataclass
class PluginLlmTextInput:
    """A text block of ``complete_structured``'s ``input``."""

    text: str
    type: str = "text"


@_dataclass
class PluginLlmImageInput:
    """An image block of ``complete_structured``'s ``input``: raw ``data``
    (bytes, sent as a ``data:`` URL of ``mime_type``) or a ``url``."""

    data: _Optional[bytes] = None
    url: _Optional[str] = None
    mime_type: str = "image/png"
    file_name: str = ""
    type: str = "image"


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


@_dataclass
class PluginLlmStructuredResult:
    """What ``complete_structured`` returns: ``parsed`` holds the answer's
    JSON (``content_type == "json"``) when JSON was asked for and the answer
    was JSON; otherwise ``parsed`` is None and ``content_type`` ``"text"``."""

    text: str
    provider: str
    model: str
    agent_id: str
    usage: PluginLlmUsage = _field(default_factory=PluginLlmUsage)
    parsed: _Optional[_Any] = None
    content_type: str = "text"
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


# What Hermes tells the model when JSON is asked for (its system message).
_JSON_ONLY = (
    "Respond with a single JSON object that matches the requested shape. "
    "Do not include prose or markdown fences."
)
# The name Hermes gives the schema in ``response_format``.
_SCHEMA_NAME = "plugin_structured_output"
_FENCED = _re.compile(r"```(?:json)?\s*(.+?)```", _re.DOTALL | _re.IGNORECASE)


def _content_part(block) -> dict:
    """One ``input`` block (a dataclass above or its dict form) as an
    OpenAI content part; a block of another shape raises ``ValueError``."""
    if isinstance(block, PluginLlmTextInput):
        block = {"type": "text", "text": block.text}
    elif isinstance(block, PluginLlmImageInput):
        block = {"type": "image", "data": block.data, "url": block.url, "mime_type": block.mime_type}
    elif not isinstance(block, dict):
        raise ValueError(f"Unsupported input block: {type(block).__name__}")
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise ValueError("text input block requires 'text' string")
        return {"type": "text", "text": block["text"]}
    if kind != "image":
        raise ValueError(f"Unknown input block type: {kind!r}")
    if block.get("url"):
        return {"type": "image_url", "image_url": {"url": block["url"]}}
    if block.get("data") is None:
        raise ValueError("image input block requires 'data' bytes or 'url'")
    data = block["data"]
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError("image input 'data' must be bytes")
    mime = block.get("mime_type") or "image/png"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{_base64.b64encode(data).decode('ascii')}"}}


def _structured_messages(instructions, inputs, json_wanted, json_schema, schema_name, system_prompt) -> list:
    """Hermes's request for a structured call: a system message (the
    caller's prompt, then the JSON-only directive when JSON is wanted) and
    one user message whose first part is the instructions with the schema's
    name and the schema itself, followed by the input blocks."""
    system = [part for part in ((system_prompt or "").strip(), _JSON_ONLY if json_wanted else "") if part]
    header = instructions.strip()
    if schema_name:
        header += f"\n\nSchema name: {schema_name}"
    if json_schema is not None:
        try:
            shown = _json.dumps(json_schema, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            shown = str(json_schema)
        header += f"\n\nJSON schema:\n{shown}"
    parts = [{"type": "text", "text": header}] + [_content_part(b) for b in inputs]
    messages = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    return messages + [{"role": "user", "content": parts}]


def _parsed(text: str, json_wanted: bool, json_schema):
    """``(parsed, content_type)`` of an answer: its JSON (the first fenced
    block's, if fenced) when JSON was wanted and it parses, else
    ``(None, "text")``; JSON that breaks ``json_schema`` raises ``ValueError``."""
    if not json_wanted or not text:
        return None, "text"
    fenced = _FENCED.search(text)
    try:
        value = _json.loads(fenced.group(1).strip() if fenced else text.strip())
    except ValueError:
        return None, "text"
    if json_schema is not None:
        problem = schema_problem(value, json_schema)  # noqa: F821 (added by the dialect)
        if problem is not None:
            raise ValueError(f"Plugin LLM structured output did not match schema: {problem}")
    return value, "json"


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

    def _call(self, messages, params):
        """``(text, provider, model, usage)`` of one call of the agent's model."""
        params = {k: v for k, v in params.items() if v is not None}
        text, full_model, usage = llm_complete(  # noqa: F821
            self._plugin_id, list(messages), params, getattr(self, "_plughost_ctx", None))
        prov, _, name = full_model.partition(":")
        return text, prov if name else "auto", name or full_model, _usage(usage)

    def complete(self, messages, *, provider=None, model=None, temperature=None, max_tokens=None,
                 timeout=None, agent_id=None, profile=None, purpose=None) -> PluginLlmCompleteResult:
        self._refuse_overrides(provider, model, agent_id, profile)
        text, prov, name, usage = self._call(messages, {"temperature": temperature, "max_tokens": max_tokens})
        return PluginLlmCompleteResult(
            text=text,
            provider=prov,
            model=name,
            agent_id="default",
            usage=usage,
            audit={"plugin_id": self._plugin_id, "purpose": purpose or "", "profile": ""},
        )

    async def acomplete(self, messages, **kwargs) -> PluginLlmCompleteResult:
        return await _asyncio.to_thread(self.complete, messages, **kwargs)

    def complete_structured(self, *, instructions, input, json_schema=None, json_mode=False, schema_name=None,
                            system_prompt=None, provider=None, model=None, temperature=None, max_tokens=None,
                            timeout=None, agent_id=None, profile=None, purpose=None) -> PluginLlmStructuredResult:
        """One bounded call of the agent's model: ``instructions`` and the
        ``input`` blocks (text, images) in; with ``json_mode=True`` or a
        ``json_schema`` the answer is parsed as JSON and checked against the
        schema (``ValueError`` when it does not match).  ``timeout`` is
        accepted; the agent's model timeout is what applies."""
        request = dict(locals())
        del request["self"]
        return self._structured("complete_structured", **request)

    async def acomplete_structured(self, *, instructions, input, json_schema=None, json_mode=False,
                                   schema_name=None, system_prompt=None, provider=None, model=None,
                                   temperature=None, max_tokens=None, timeout=None, agent_id=None, profile=None,
                                   purpose=None) -> PluginLlmStructuredResult:
        """Async sibling of :meth:`complete_structured`."""
        request = dict(locals())
        del request["self"]
        return await _asyncio.to_thread(self._structured, "acomplete_structured", **request)

    def _structured(self, name, *, instructions, input, json_schema, json_mode, schema_name, system_prompt,
                    provider, model, temperature, max_tokens, timeout, agent_id, profile, purpose):
        if not isinstance(instructions, str) or not instructions.strip():
            raise ValueError(f"{name} requires non-empty instructions")
        if not input:
            raise ValueError(f"{name} requires at least one input block")
        self._refuse_overrides(provider, model, agent_id, profile)
        json_wanted = bool(json_mode) or json_schema is not None
        if json_schema is not None:
            check_schema(json_schema)  # noqa: F821 -- a broken schema fails before the model is asked
            response_format = {"type": "json_schema",
                               "json_schema": {"name": _SCHEMA_NAME, "schema": json_schema, "strict": False}}
        else:
            response_format = {"type": "json_object"} if json_mode else None
        messages = _structured_messages(instructions, list(input), json_wanted, json_schema, schema_name, system_prompt)
        text, prov, model_name, usage = self._call(
            messages, {"temperature": temperature, "max_tokens": max_tokens, "response_format": response_format}
        )
        parsed, content_type = _parsed(text, json_wanted, json_schema)
        return PluginLlmStructuredResult(
            text=text,
            provider=prov,
            model=model_name,
            agent_id="default",
            usage=usage,
            parsed=parsed,
            content_type=content_type,
            audit={"plugin_id": self._plugin_id, "purpose": purpose or "", "profile": "",
                   "schema_name": schema_name or ""},
        )


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


def _settled(result):
    """A provider's answer; an awaitable one (a sync method returning a
    coroutine) run to its end on this worker thread."""
    if _inspect.isawaitable(result):
        async def _await():
            return await result

        return _asyncio.run(_await())
    return result


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

        # An ``async def`` search/extract of the Hermes provider stays a
        # coroutine function here, so the tools await it; a sync one runs on
        # a worker thread, an awaitable it returns run to its end there.
        def search(self, query: str, limit: int = 5):
            return _settled(self._inner.search(query, limit))

        def extract(self, urls, **kwargs):
            return _settled(self._inner.extract(urls, **kwargs))

        async def _search_async(self, query: str, limit: int = 5):
            return await self._inner.search(query, limit)

        async def _extract_async(self, urls, **kwargs):
            return await self._inner.extract(urls, **kwargs)

        def __getattribute__(self, attr):
            if attr in ("search", "extract"):
                inner = object.__getattribute__(self, "_inner")
                if _inspect.iscoroutinefunction(getattr(inner, attr, None)):
                    return object.__getattribute__(self, f"_{attr}_async")
            return object.__getattribute__(self, attr)

    register_provider(HermesWebProvider(provider))
