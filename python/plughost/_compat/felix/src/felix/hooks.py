"""Agent-loop hook types, as ``felix.hooks`` names them."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

BeforeTurnHook = Callable[[list, dict], Any]
FilterHistoryHook = Callable[[list, dict], Any]
BeforeCompactHook = Callable[[dict, dict], Any]
BeforeToolHook = Callable[[dict, dict], Any]
AfterToolHook = Callable[[dict, str, bool, dict], Any]
CompactFailedHook = Callable[[dict, dict], Any]
BeforeModelHook = Callable[[dict, dict], Any]
AfterModelHook = Callable[[dict, dict], Any]


def get_agent_hooks() -> dict:
    """The hooks registered in this process, by kind (plughost keeps them per plugin)."""
    return {}


__all__ = [
    "BeforeTurnHook", "FilterHistoryHook", "BeforeCompactHook", "BeforeToolHook",
    "AfterToolHook", "CompactFailedHook", "BeforeModelHook", "AfterModelHook", "get_agent_hooks",
]
