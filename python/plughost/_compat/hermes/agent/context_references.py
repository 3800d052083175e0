"""``agent.context_references`` (plughost): the part of Hermes's
``@``-reference machinery plugins reach — :class:`ContextReferenceProvider`
(registered with ``ctx.register_context_reference``) and the expansion of
``@<prefix>:<target>`` in a user message, as Hermes expands it: each
provider's ``expand(target)`` (awaited), its text attached below the
message under ``--- Attached Context ---`` as ``📌 <raw> (<n> tokens)``,
failures and unknown prefixes under ``--- Context Warnings ---``, the
references left where the user typed them.

plughost expands only plugin prefixes; the built-in ones (``@file:``,
``@diff`` …) are Hermes's CLI features and stay as typed. Providers are
kept per host (the plugin's event bus), never in module state.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod

#: Prefixes Hermes reserves for its built-in references.
BUILTIN_PREFIXES = frozenset({"diff", "staged", "file", "folder", "git", "url"})

_QUOTED = r'(?:`[^`\n]+`|"[^"\n]+"|\'[^\'\n]+\')'
_PLUGIN_REFERENCE_PATTERN = re.compile(
    rf"(?<![\w/])@(?P<kind>[A-Za-z][A-Za-z0-9_-]*):(?P<value>{_QUOTED}|\S+)")
TRAILING_PUNCTUATION = ",.;!?"
_OPENERS = {")": "(", "]": "[", "}": "{"}
#: plughost does not know the model's context window; Hermes's limits
#: (50 % refused, 25 % warned) are taken of this many tokens.
DEFAULT_CONTEXT_LENGTH = 128_000


class ContextCompletionItem:
    """A single autocomplete result from a context reference provider."""

    __slots__ = ("text", "display", "meta")

    def __init__(self, text: str, display: str = "", meta: str = "") -> None:
        self.text = text
        self.display = display or text
        self.meta = meta


class ContextReferenceProvider(ABC):
    """Base class for plugin ``@<prefix>:`` providers."""

    prefix: str = ""
    description: str = ""

    @abstractmethod
    async def autocomplete(self, query: str, *, limit: int = 10) -> list:
        """Autocomplete items for ``query`` (plughost's CLI offers none)."""

    @abstractmethod
    async def expand(self, target: str):
        """Expand *target* to prompt content; ``None`` to skip."""


def estimate_tokens_rough(text: str) -> int:
    return (len(text) + 3) // 4


def _strip_trailing_punctuation(value: str) -> str:
    stripped = value.rstrip(TRAILING_PUNCTUATION)
    while stripped.endswith((")", "]", "}")) and stripped.count(stripped[-1]) > stripped.count(_OPENERS[stripped[-1]]):
        stripped = stripped[:-1]
    return stripped


def _strip_wrappers(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "`\"'" else value


def check_provider(provider, prefixes) -> str:
    """The provider's normalised prefix, or ``ValueError`` as Hermes's registry raises it."""
    prefix = str(getattr(provider, "prefix", "") or "").lower().strip()
    if not prefix:
        raise ValueError("prefix must be a non-empty string")
    if prefix in BUILTIN_PREFIXES:
        raise ValueError(f"prefix '{prefix}' is reserved for built-in references")
    if prefix in prefixes:
        raise ValueError(f"prefix '{prefix}' is already registered")
    return prefix


async def _expand_one(raw: str, kind: str, target: str, providers: dict):
    provider = providers.get(kind)
    if provider is None:
        return f"{raw}: unsupported reference type", None
    try:
        content = provider.expand(target)
        if asyncio.iscoroutine(content) or isinstance(content, asyncio.Future):
            content = await content
    except Exception as exc:
        return f"{raw}: plugin expansion error: {exc}", None
    if content is None:
        return None, None
    content = str(content)
    return None, f"📌 {raw} ({estimate_tokens_rough(content)} tokens)\n{content}"


async def expand_message(message: str, providers: dict, context_length: int = DEFAULT_CONTEXT_LENGTH) -> str:
    """``message`` with its plugin references expanded (unchanged when it has none)."""
    refs = []
    for match in _PLUGIN_REFERENCE_PATTERN.finditer(message or ""):
        kind = match.group("kind").lower()
        if kind in BUILTIN_PREFIXES or kind not in providers:
            continue
        target = _strip_wrappers(_strip_trailing_punctuation(match.group("value") or ""))
        refs.append((match.group(0), kind, target))
    if not refs:
        return message
    expanded = await asyncio.gather(*(_expand_one(raw, k, t, providers) for raw, k, t in refs))
    warnings = [w for w, _ in expanded if w]
    blocks = [b for _, b in expanded if b]
    injected = sum(estimate_tokens_rough(b) for b in blocks)
    hard, soft = max(1, int(context_length * 0.50)), max(1, int(context_length * 0.25))
    if injected > hard:
        warnings.append(f"@ context injection refused: {injected} tokens exceeds the 50% hard limit ({hard}).")
        blocks = []
    elif injected > soft:
        warnings.append(f"@ context injection warning: {injected} tokens exceeds the 25% soft limit ({soft}).")
    final = message
    if warnings:
        final = f"{final}\n\n--- Context Warnings ---\n" + "\n".join(f"- {w}" for w in warnings)
    if blocks:
        final = f"{final}\n\n--- Attached Context ---\n\n" + "\n\n".join(blocks)
    return final.strip()
