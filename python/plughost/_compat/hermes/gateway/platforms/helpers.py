"""``gateway.platforms.helpers`` compat (plughost): small adapter helpers."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_task(task, timeout: float = 5.0) -> None:
    """Cancel ``task`` (if any) and wait for it to unwind, bounded."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError, Exception):
        await asyncio.wait_for(asyncio.shield(task), timeout=timeout)
