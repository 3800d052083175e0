"""command-guard: a pre_tool_call hook that blocks destructive shell commands.

Public Flowly API only.  It looks at the ``command`` of ``exec`` (and
``terminal`` / ``shell``) tool calls and returns a ``BlockAction`` for
commands that would wreck the machine: removing ``/``, ``~`` or ``*`` at
the top, formatting or overwriting block devices, fork bombs, shutting the
machine down, or making everything world-writable.  Add your own patterns
with ``PLUGHOST_GUARD_EXTRA`` (regular expressions separated by ``;;``).
"""

from __future__ import annotations

import os

from flowly.agent.hooks import BlockAction


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


SHELL_TOOLS = {"exec", "terminal", "shell", "bash"}

RULES = [
    (r"\brm\s+(-[a-zA-Z]*[rR][a-zA-Z]*\s+|--recursive\s+)+(-[a-zA-Z]+\s+)*(/|/\*|~/?|\$HOME/?|\*)(\s|;|&|$)", "recursive removal of /, ~ or everything"),
    (r"\bmkfs(\.\w+)?\b", "formatting a filesystem"),
    (r"\bdd\b[^;&|]*\bof=/dev/(sd|nvme|hd|vd|xvd|mmcblk|disk)", "overwriting a disk device with dd"),
    (r">\s*/dev/(sd|nvme|hd|vd|xvd|mmcblk|disk)\w*", "writing to a disk device"),
    (r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", "a fork bomb"),
    (r"\b(shutdown|reboot|halt|poweroff)\b", "shutting the machine down"),
    (r"\bchmod\s+(-[a-zA-Z]*R[a-zA-Z]*\s+)+0?777\s+/(\s|$)", "making / world-writable"),
]

_compiled = None


def _rules():
    global _compiled
    if _compiled is None:
        import re

        rules = [(re.compile(p), why) for p, why in RULES]
        for extra in filter(None, os.environ.get("PLUGHOST_GUARD_EXTRA", "").split(";;")):
            try:
                rules.append((re.compile(extra), f"matches the site rule {extra!r}"))
            except re.error as exc:
                _logger().warning("command-guard: ignoring invalid PLUGHOST_GUARD_EXTRA pattern %r: %s", extra, exc)
        _compiled = rules
    return _compiled


def check(command: str):
    """The reason ``command`` is refused, or None."""
    for pattern, why in _rules():
        if pattern.search(command):
            return why
    return None


def _pre_tool_call(ctx):
    if ctx.tool_name not in SHELL_TOOLS:
        return None
    command = ctx.params.get("command") or ctx.params.get("cmd") or ""
    if not isinstance(command, str):
        return None
    why = check(command)
    if why:
        _logger().warning("command-guard blocked %r: %s", command, why)
        return BlockAction(f"command-guard refused {command!r}: {why}")
    return None


# The tools the hook looks at: plughost does not call it for others (a
# host that does not know the attribute calls it, and it returns at once).
_pre_tool_call.__plughost_tools__ = tuple(sorted(SHELL_TOOLS))


def register(ctx):
    ctx.register_hook("pre_tool_call", _pre_tool_call)
