"""``gateway.platforms.helpers`` compat (plughost): the adapter helpers
Hermes's platform plugins import (``gateway/platforms/helpers.py``), with
Hermes's behaviour: message de-duplication, text batching, thread
participation, markdown stripping and phone redaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional

logger = logging.getLogger(__name__)


class MessageDeduplicator:
    """A cache of message ids seen within ``ttl_seconds``, bounded by
    ``max_size`` (``if dedup.is_duplicate(msg_id): return``)."""

    def __init__(self, max_size: int = 2000, ttl_seconds: float = 300) -> None:
        self._seen: Dict[str, float] = {}
        self._max_size = max_size
        self._ttl = ttl_seconds

    def is_duplicate(self, msg_id: str) -> bool:
        """True when ``msg_id`` was seen within the TTL; otherwise records
        it now. An empty id is never a duplicate."""
        if not msg_id:
            return False
        now = time.time()
        seen_at = self._seen.get(msg_id)
        if seen_at is not None:
            if now - seen_at < self._ttl:
                return True
            del self._seen[msg_id]
        self._seen[msg_id] = now
        if len(self._seen) > self._max_size:
            cutoff = now - self._ttl
            self._seen = {k: v for k, v in self._seen.items() if v > cutoff}
            if len(self._seen) > self._max_size:
                newest = sorted(self._seen.items(), key=lambda item: item[1])[-self._max_size:]
                self._seen = dict(newest)
        return False

    def contains(self, msg_id: str) -> bool:
        """Whether ``msg_id`` is live in the cache (it is not recorded)."""
        seen_at = self._seen.get(msg_id) if msg_id else None
        if seen_at is None:
            return False
        if time.time() - seen_at < self._ttl:
            return True
        del self._seen[msg_id]
        return False

    def discard(self, msg_id: str) -> None:
        """Forget ``msg_id`` (a hand-off that was cancelled or failed)."""
        self._seen.pop(msg_id, None)

    def clear(self) -> None:
        self._seen.clear()


async def cancel_task(task: Optional["asyncio.Task[Any]"], timeout: float = 5.0) -> None:
    """Cancel ``task`` (if any) and wait for it to unwind, bounded; a task
    cancelling itself only asks (awaiting itself would deadlock)."""
    if task is None or task.done():
        return
    task.cancel()
    if task is asyncio.current_task():
        return
    with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError, Exception):
        await asyncio.wait_for(asyncio.shield(task), timeout=timeout)


class TextBatchAggregator:
    """Joins text events that arrive in quick succession for one key into
    one event (their texts joined by newlines), handed to ``handler`` once
    ``batch_delay`` seconds pass without another — ``split_delay`` when the
    last chunk is at least ``split_threshold`` characters (a message the
    platform split)."""

    def __init__(
        self,
        handler: Callable[[Any], Awaitable[Any]],
        *,
        batch_delay: float = 0.6,
        split_delay: float = 2.0,
        split_threshold: int = 4000,
    ) -> None:
        self._handler = handler
        self._batch_delay = batch_delay
        self._split_delay = split_delay
        self._split_threshold = split_threshold
        self._pending: Dict[str, Any] = {}
        self._pending_tasks: Dict[str, "asyncio.Task[None]"] = {}

    def is_enabled(self) -> bool:
        """Batching is on (a positive delay)."""
        return self._batch_delay > 0

    def enqueue(self, event: Any, key: str) -> None:
        """Add ``event`` to ``key``'s batch and restart its timer (needs a
        running loop)."""
        chunk_len = len(event.text or "")
        existing = self._pending.get(key)
        if not existing:
            event._last_chunk_len = chunk_len
            self._pending[key] = event
        else:
            existing.text = f"{existing.text}\n{event.text}"
            existing._last_chunk_len = chunk_len
        prior = self._pending_tasks.get(key)
        if prior and not prior.done():
            prior.cancel()
        self._pending_tasks[key] = asyncio.create_task(self._flush(key))

    async def _flush(self, key: str) -> None:
        current = self._pending_tasks.get(key)
        pending = self._pending.get(key)
        last_len = getattr(pending, "_last_chunk_len", 0) if pending else 0
        delay = self._split_delay if last_len >= self._split_threshold else self._batch_delay
        await asyncio.sleep(delay)
        event = self._pending.pop(key, None)
        if event:
            try:
                await self._handler(event)
            except Exception:
                logger.exception("[TextBatchAggregator] Error dispatching batched event for %s", key)
        if self._pending_tasks.get(key) is current:
            self._pending_tasks.pop(key, None)

    def cancel_all(self) -> None:
        """Cancel every pending timer and drop the batches."""
        for task in self._pending_tasks.values():
            if not task.done():
                task.cancel()
        self._pending_tasks.clear()
        self._pending.clear()


# Applied in order: bold, italic, underscore bold/italic, fence markers,
# inline code, headings, links, then runs of blank lines.
_STRIP_RULES = (
    (re.compile(r"\*\*(.+?)\*\*", re.DOTALL), r"\1"),
    (re.compile(r"\*(.+?)\*", re.DOTALL), r"\1"),
    (re.compile(r"\b__(?![\s_])(.+?)(?<![\s_])__\b", re.DOTALL), r"\1"),
    (re.compile(r"\b_(?![\s_])(.+?)(?<![\s_])_\b", re.DOTALL), r"\1"),
    (re.compile(r"```[a-zA-Z0-9_+-]*\n?"), ""),
    (re.compile(r"`(.+?)`"), r"\1"),
    (re.compile(r"^#{1,6}\s+", re.MULTILINE), ""),
    (re.compile(r"\[([^\]]+)\]\([^\)]+\)"), r"\1"),
    (re.compile(r"\n{3,}"), "\n\n"),
)


def strip_markdown(text: str) -> str:
    """``text`` without markdown formatting (for plain-text platforms)."""
    for pattern, replacement in _STRIP_RULES:
        text = pattern.sub(replacement, text)
    return text.strip()


class ThreadParticipationTracker:
    """The threads the bot took part in, kept in
    ``$HERMES_HOME/<platform>_threads.json`` (the newest ``max_tracked``):
    ``thread_id in tracker``; ``tracker.mark(thread_id)`` records one."""

    _MAX_TRACKED = 500

    def __init__(self, platform_name: str, max_tracked: int = 500) -> None:
        self._platform = platform_name
        self._max_tracked = max_tracked
        self._threads: Dict[str, None] = dict.fromkeys(str(t) for t in self._load())

    def _state_path(self) -> Path:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home()) / f"{self._platform}_threads.json"

    def _load(self) -> List[str]:
        try:
            data = json.loads(self._state_path().read_text(encoding="utf-8-sig"))
        except Exception:
            return []
        return [str(thread_id) for thread_id in data] if isinstance(data, list) else []

    def _save(self) -> None:
        threads = list(self._threads)
        if len(threads) > self._max_tracked:
            threads = threads[-self._max_tracked:]
            self._threads = dict.fromkeys(threads)
        _write_json_atomically(self._state_path(), threads)

    def mark(self, thread_id: str) -> None:
        """Record ``thread_id`` (written at once)."""
        if thread_id not in self._threads:
            self._threads[thread_id] = None
            self._save()

    def __contains__(self, thread_id: object) -> bool:
        return thread_id in self._threads

    def clear(self) -> None:
        self._threads.clear()


def _write_json_atomically(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, through a temporary file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def redact_phone(phone: str) -> str:
    """A phone number for logs: its first four and last four digits kept
    (two and two for a short one; ``****`` for four or fewer)."""
    if not phone:
        return "<none>"
    if len(phone) <= 8:
        return phone[:2] + "****" + phone[-2:] if len(phone) > 4 else "****"
    return phone[:4] + "****" + phone[-4:]
