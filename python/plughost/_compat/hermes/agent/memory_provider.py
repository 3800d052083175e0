"""``agent.memory_provider`` compat (plughost): Hermes's ``MemoryProvider``
base class, and the helpers plughost drives the one active provider with.

plughost drives it as Hermes's ``MemoryManager`` does (see
``docs/hermes-providers.md``): ``initialize`` once per session,
``system_prompt_block`` and ``prefetch`` before each turn (the recall fenced
in ``<memory-context>`` and added to the turn's user message for every model
call, never stored), ``sync_turn`` and ``queue_prefetch`` after it, its
``get_tool_schemas`` offered to the model and dispatched to
``handle_tool_call``, ``on_session_end`` when the session ends and
``shutdown`` when the host goes.  A call that raises is logged with its
traceback and the turn goes on.
"""

from __future__ import annotations

import logging
import re
from abc import ABC
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

logger = logging.getLogger(__name__)

PRE_COMPRESS_CHECKPOINT_API_VERSION = 2
INDICATOR_GLYPH = "\U0001f9e0"


@dataclass(frozen=True)
class RecallStatus:
    """What a provider's most recent prefetch injected (Hermes's shape)."""

    provider_label: str
    count: int
    glyph: str = INDICATOR_GLYPH


TRIVIAL_PROMPT_RE = re.compile(
    r"^(yes|no|ok|okay|sure|thanks|thank you|y|n|yep|nope|yeah|nah|"
    r"hi|hey|hello|yo|sup|"
    r"continue|go ahead|do it|proceed|got it|cool|nice|great|done|next|lgtm|k)"
    r"[\s!?.:;,\"'~\u2018\u2019\u201c\u201d\u2014\u2013\u2026()\[\]{}<>*&^%$#@!+=`\u00a0]*$",
    re.IGNORECASE,
)


def is_trivial_prompt(text: Optional[str]) -> bool:
    """True for a prompt too trivial to recall memory for (Hermes's gate)."""
    if not text or not text.strip():
        return True
    stripped = text.strip()
    if stripped.startswith("/"):
        return True
    return bool(TRIVIAL_PROMPT_RE.match(stripped))


class MemoryProvider(ABC):
    """Base of Hermes's memory providers (``agent/memory_provider.py``).

    Hermes's ``name``, ``is_available``, ``initialize`` and
    ``get_tool_schemas`` are abstract; plughost's base gives them defaults
    so a provider that leaves one out still loads (and says nothing)."""

    pre_compress_checkpoint_api_version = 1

    name: str = ""

    def is_available(self) -> bool:
        """True when configured and ready (no network calls)."""
        return True

    def initialize(self, session_id: str, **kwargs) -> None:
        """Prepare for a session (``hermes_home``, ``platform`` and
        ``agent_context`` are passed as keywords)."""

    def initialize_for_inspection(self, session_id: str, **kwargs) -> None:
        self.initialize(session_id=session_id, **kwargs)

    def unavailable_reason(self) -> str:
        return ""

    def system_prompt_block(self) -> str:
        return ""

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        return ""

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        """Queue a background recall for the next turn (no-op by default)."""

    def recall_status(self) -> Optional[RecallStatus]:
        return None

    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: Optional[List[Dict[str, Any]]] = None,
    ) -> None:
        """Persist a completed turn (no-op by default)."""

    def get_tool_schemas(self) -> List[Dict[str, Any]]:
        """Tool schemas offered to the model (``{"name", "description", "parameters"}``)."""
        return []

    def handle_tool_call(self, tool_name: str, args: Dict[str, Any], **kwargs) -> str:
        raise NotImplementedError(f"Provider {self.name} does not handle tool {tool_name}")

    def shutdown(self) -> None:
        """Flush and close (no-op by default)."""

    def on_turn_start(self, turn_number: int, message: str, **kwargs) -> None:
        """Per-turn tick (no-op by default)."""

    def on_session_end(self, messages: List[Dict[str, Any]]) -> None:
        """End-of-session extraction (no-op by default)."""

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, rewound: bool = False, **kwargs) -> None:
        """Session id rotation (plughost never rotates a session's id)."""

    def on_pre_compress(self, messages: List[Dict[str, Any]]) -> str:
        return ""

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "", **kwargs) -> None:
        """Parent-side observation of a subagent (no-op by default)."""

    def on_memory_write(self, action: str, target: str, content: str, metadata=None) -> None:
        """Mirror of a built-in memory write (plughost has no built-in memory)."""

    def get_config_schema(self) -> List[Dict[str, Any]]:
        return []

    def save_config(self, values: Dict[str, Any], hermes_home: str) -> None:
        """Write non-secret config (not called by plughost)."""

    def backup_paths(self) -> List[str]:
        return []


# --- plughost's driving helpers (not part of Hermes's API) ----------------

_FENCE_TAG_RE = re.compile(r"</?\s*memory-context\s*>", re.IGNORECASE)
_INTERNAL_CONTEXT_RE = re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.IGNORECASE)
_INTERNAL_NOTE_RE = re.compile(
    r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.[^\]]*\]\s*",
    re.IGNORECASE,
)


def _plughost_fence(raw_context: Any) -> str:
    """Hermes's ``build_memory_context_block``: recall fenced so the model
    cannot take it for new user input; ``""`` for nothing recalled."""
    if not isinstance(raw_context, str) or not raw_context.strip():
        return ""
    clean = _INTERNAL_CONTEXT_RE.sub("", raw_context)
    clean = _INTERNAL_NOTE_RE.sub("", clean)
    clean = _FENCE_TAG_RE.sub("", clean)
    if clean != raw_context:
        logger.warning("memory provider returned pre-wrapped context; stripped")
    return (
        "<memory-context>\n"
        "[System note: The following is recalled memory context, "
        "NOT new user input. Treat as authoritative reference data \u2014 "
        "this is the agent's persistent memory and should inform all responses.]\n\n"
        f"{clean}\n"
        "</memory-context>"
    )


def _plughost_sync_accepts(provider: Any, keyword: str) -> bool:
    """Whether ``provider.sync_turn`` accepts ``keyword`` (a parameter of
    that name or ``**kwargs``), as Hermes's ``MemoryManager._provider_sync_accepts``
    decides; an uninspectable signature is taken to accept it."""
    import inspect

    try:
        params = inspect.signature(provider.sync_turn).parameters
    except (TypeError, ValueError):
        return True
    return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _plughost_sync_kwargs(provider: Any, session_id: str, optional: Dict[str, Any]) -> Dict[str, Any]:
    """The keywords of one ``sync_turn`` call, as Hermes's ``MemoryManager.sync_all``
    builds them: ``session_id`` always; each of ``optional`` (``messages``,
    ``turn_author``) only when not ``None`` and the provider's signature accepts it."""
    kwargs: Dict[str, Any] = {"session_id": session_id}
    for keyword, value in optional.items():
        if value is not None and _plughost_sync_accepts(provider, keyword):
            kwargs[keyword] = value
    return kwargs


def _plughost_tool(provider: Any, tool_name: str):
    """A Hermes tool handler for one of ``provider``'s tools: the call goes
    to ``provider.handle_tool_call(tool_name, args)``; its JSON string back."""

    def handle_tool_call(args, **kwargs):
        return provider.handle_tool_call(tool_name, args or {}, **kwargs)

    handle_tool_call.__qualname__ = f"{type(provider).__name__}.handle_tool_call"
    return handle_tool_call


def _plughost_entry_point_register(loaded: Any, name: str):
    """``register(ctx)`` for a ``hermes_agent.memory_providers`` entry point,
    in Hermes's ``_load_provider_from_entry_point`` order: a provider
    instance, a subclass (instantiated), an object with ``register(ctx)``, a
    factory returning a provider (else called as ``register(ctx)``), a
    namespace holding a subclass. One that yields nothing fails the load with
    a message, where Hermes only logs at debug level."""

    def register(ctx):
        if isinstance(loaded, MemoryProvider):
            return ctx.register_memory_provider(loaded)
        if isinstance(loaded, type) and issubclass(loaded, MemoryProvider):
            return ctx.register_memory_provider(loaded())
        if hasattr(loaded, "register"):
            return loaded.register(ctx)
        if callable(loaded):
            try:
                provider = loaded()
            except TypeError:
                return loaded(ctx)
            if isinstance(provider, MemoryProvider):
                return ctx.register_memory_provider(provider)
            return loaded(ctx)
        for attr_name in dir(loaded):
            attr = getattr(loaded, attr_name, None)
            if isinstance(attr, type) and issubclass(attr, MemoryProvider) and attr is not MemoryProvider:
                return ctx.register_memory_provider(attr())
        raise TypeError(
            f"memory provider entry point '{name}' loaded {type(loaded).__name__} "
            "with no MemoryProvider, register(ctx) or factory"
        )

    return register


#: Where Hermes's memory loader imports a user's memory plugin directory.
_USER_NAMESPACE = "_hermes_user_memory"


def _plughost_import_memory_dir(name: str, directory: str):
    """Import a memory plugin directory as Hermes's memory loader does, as the
    package ``_hermes_user_memory.<name>`` (its synthetic parent registered
    first), so code that checks ``__name__`` or ``__spec__.parent`` sees
    Hermes's. Another host of this process holding that name gets
    ``<name>__2``, … under the same parent. Returns ``(module name, module)``;
    on failure nothing of it stays imported."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    if _USER_NAMESPACE not in sys.modules:
        parent = importlib.machinery.ModuleSpec(_USER_NAMESPACE, None, is_package=True)
        parent.submodule_search_locations = []
        sys.modules[_USER_NAMESPACE] = importlib.util.module_from_spec(parent)
    base = f"{_USER_NAMESPACE}.{name}"
    module_name, n = base, 1
    while module_name in sys.modules:
        n += 1
        module_name = f"{base}__{n}"
    spec = importlib.util.spec_from_file_location(
        module_name, os.path.join(directory, "__init__.py"), submodule_search_locations=[directory])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import memory plugin from {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _plughost_forget_memory_dir(module_name)
        raise
    return module_name, module


def _plughost_forget_memory_dir(module_name: str) -> None:
    """Drop a memory plugin's package and its submodules from ``sys.modules``."""
    import sys

    for loaded in [m for m in sys.modules if m == module_name or m.startswith(module_name + ".")]:
        sys.modules.pop(loaded, None)


def _plughost_dir_register(module: Any, name: str):
    """``register(ctx)`` for a memory plugin directory, as Hermes's
    ``_load_provider_from_dir``: the module's own ``register``, else its first
    top-level ``MemoryProvider`` subclass that instantiates (in ``dir()``
    order, a constructor that raises skipped). Neither fails the load, saying
    so (Hermes logs that it "loaded but no provider instance found")."""
    own = getattr(module, "register", None)
    if own is not None:
        return own

    def register(ctx):
        for attr_name in dir(module):
            attr = getattr(module, attr_name, None)
            if isinstance(attr, type) and issubclass(attr, MemoryProvider) and attr is not MemoryProvider:
                try:
                    provider = attr()
                except Exception:
                    continue
                return ctx.register_memory_provider(provider)
        raise AttributeError(
            f"memory provider '{name}' has no register() function and no MemoryProvider subclass "
            "that instantiates (Hermes: loaded but no provider instance found)")

    return register
