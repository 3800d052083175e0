"""tool-audit: an audit trail of tool calls.

Uses only the public Flowly plugin API, so it runs unmodified under any host
that implements it.  Every finished tool call is appended as one JSON line to
``<home>/tool-audit/calls.jsonl`` (by a writer thread, off the tool-call
path: ``store`` says when what is on disk); ``audit_summary`` (a tool) and
``/audit`` (a command) read it back.
"""

from __future__ import annotations

from pathlib import Path

from . import store


def _audit_command(log: store.AuditLog, raw_args: str) -> str:
    args = raw_args.split()
    if not args or args[0] == "recent":
        count = int(args[1]) if len(args) > 1 and args[1].isdigit() else 10
        return log.recent(count)
    if args[0] == "summary":
        return log.summary(limit=10)
    if args[0] == "clear":
        removed = log.clear()
        return f"Cleared {removed} audit record(s)."
    return "Usage: /audit [recent [N] | summary | clear]"


def register(ctx) -> None:
    # The log is reachable only from these callables (never from a module
    # global), so when the host lets them go the log goes too and writes
    # out what it still holds (see ``store``).
    log = store.AuditLog(skip=("audit_summary",))
    append = log.append

    def _on_post_tool_call(ctx) -> None:
        tool = ctx.tool_name
        if tool == "audit_summary":
            return
        append(tool, ctx.session_id, ctx.duration_ms, ctx.success)

    # Under plughost the native log is the hook itself: the host records
    # into it without entering Python.
    hook = log.native if log.native is not None else _on_post_tool_call

    def _audit_summary(limit: int = 10) -> str:
        return log.summary(limit=limit)

    ctx.register_hook("post_tool_call", hook)
    ctx.register_tool(
        name="audit_summary",
        schema={
            "type": "object",
            "properties": {
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "description": "How many tools to list, most called first.",
                }
            },
        },
        handler=_audit_summary,
        description="Summarise the recorded tool calls: count, failures and mean duration per tool.",
    )
    ctx.register_command(
        "audit",
        handler=lambda raw_args: _audit_command(log, raw_args),
        description="Show the tool-call audit trail.",
        args_hint="[recent [N] | summary | clear]",
    )
    ctx.register_skill(
        name="reading-the-audit",
        path=Path(__file__).parent / "skills" / "reading-the-audit" / "SKILL.md",
        description="How to read the tool-audit trail",
    )
