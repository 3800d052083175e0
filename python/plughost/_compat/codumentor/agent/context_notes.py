"""``add_context_note``: the one primitive for putting a note in front of the model.

Notes are user-role messages tagged ``metadata={"synthetic_note": True, ...}``
(plughost strips the tag before sending). ``scope="prefix"`` puts the note
right after a leading system message; ``"pre_query"`` (alias ``"tail"``)
immediately before the last user message that is not itself a note.
"""

from __future__ import annotations

import hashlib


def content_freshness(text) -> str:
    """A short stable hash of ``text``."""
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:12]


def _key(message):
    meta = message.get("metadata") if isinstance(message, dict) else None
    if isinstance(meta, dict) and meta.get("synthetic_note"):
        return meta.get("note_key"), meta.get("note_marker")
    return None, None


def add_context_note(messages, *, marker, render, scope="prefix", when=None, freshness=None, ctx=None, agent=None):
    """A new full message list with the note inserted, or ``None`` when
    ``when(agent, ctx)`` is false or the note (same dedupe key) is already there."""
    if scope == "tail":
        scope = "pre_query"
    if scope not in ("prefix", "pre_query"):
        raise ValueError(f"add_context_note: scope must be 'prefix' or 'pre_query', got {scope!r}")
    if when is not None and not when(agent, ctx):
        return None
    key = marker if freshness is None else f"{marker}#{freshness}"
    messages = list(messages or [])
    stale = []
    for i, message in enumerate(messages):
        existing, existing_marker = _key(message)
        if existing == key:
            return None
        if freshness is not None and existing_marker == marker:
            stale.append(i)
    for i in reversed(stale):
        del messages[i]
    note = {
        "role": "user",
        "content": render() if callable(render) else str(render),
        "metadata": {"synthetic_note": True, "note_key": key, "note_marker": marker, "scope": scope},
    }
    if scope == "prefix":
        at = 1 if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system" else 0
    else:
        at = len(messages)
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if isinstance(m, dict) and m.get("role") == "user" and _key(m) == (None, None):
                at = i
                break
    messages.insert(at, note)
    return messages
