"""disk-cleanup: track the ephemeral files agents create, and delete them.

Uses only the public Flowly plugin API (``register(ctx)``, ``register_hook``,
``register_command``, ``flowly.profile.get_flowly_home``), so it runs
unmodified under any host that implements it.

* ``post_tool_call``: files written by ``write_file`` / ``edit_file`` /
  ``exec`` that look ephemeral (test scripts, temp outputs) and lie under the
  home or ``/tmp/plughost-*`` are tracked.
* ``on_session_end``: the test files tracked during that session are
  deleted, emptied directories removed, and one line is logged to
  ``<home>/disk-cleanup/cleanup.log``.
* ``/disk-cleanup status | dry-run | quick | track <path> <category> |
  forget <path> | help``.

Nothing here ever raises into the host: every entry point catches and logs.
"""

from __future__ import annotations

import logging

from . import cleaner, safety, tracker

logger = logging.getLogger(__name__)

#: Tools whose calls may create files, and the parameters that name them.
WRITE_TOOLS = {"write_file": ("path", "file_path", "filename"), "edit_file": ("path", "file_path", "filename")}
EXEC_TOOLS = {"exec": ("command", "cmd")}


def _on_post_tool_call(ctx) -> None:
    try:
        name = getattr(ctx, "tool_name", "")
        if name not in WRITE_TOOLS and name not in EXEC_TOOLS:
            return
        if getattr(ctx, "success", None) is False:
            return
        params = getattr(ctx, "params", None) or {}
        if name in WRITE_TOOLS:
            candidates = [params[k] for k in WRITE_TOOLS[name] if isinstance(params.get(k), str)]
            # A relative path means the host's workspace, which only the
            # tool knows: hosts name the absolute path in the result.
            candidates += safety.paths_in_output(getattr(ctx, "result", "") or "")
            base = None
        else:
            command = next((params[k] for k in EXEC_TOOLS[name] if isinstance(params.get(k), str)), "")
            base = params.get("cwd") or params.get("working_dir") or params.get("workdir")
            candidates = safety.paths_in_command(command) + safety.paths_in_output(getattr(ctx, "result", "") or "")
        roots = safety.Roots.current()
        state = tracker.load()
        added = 0
        for raw in candidates:
            path = safety.absolute(raw, base)
            if path is None or not safety.is_regular_file(path):
                continue
            category = safety.categorize(path, roots)
            if category is None or not roots.may_delete(path):
                continue
            if tracker.track(state, path, category, getattr(ctx, "session_id", "") or ""):
                added += 1
        if added:
            tracker.save(state)
            logger.debug("disk-cleanup: tracking %d new file(s)", added)
    except Exception:  # a failing hook must never break the agent loop
        logger.exception("disk-cleanup: post_tool_call tracking failed")


def _on_session_end(ctx) -> None:
    try:
        session = getattr(ctx, "session_id", "") or ""
        result = cleaner.clean_session(session)
        cleaner.log_line(f"session={session or '-'} {result.summary()}")
    except Exception:
        logger.exception("disk-cleanup: session-end cleanup failed")


def _handle_slash(raw_args: str) -> str:
    try:
        return cleaner.command(raw_args)
    except Exception as exc:
        logger.exception("disk-cleanup: /disk-cleanup %s failed", raw_args)
        return f"disk-cleanup failed: {type(exc).__name__}: {exc}"


def register(ctx) -> None:
    ctx.register_hook("post_tool_call", _on_post_tool_call)
    ctx.register_hook("on_session_end", _on_session_end)
    ctx.register_command(
        "disk-cleanup",
        handler=_handle_slash,
        description="Track and clean up ephemeral session files.",
        args_hint="status | dry-run | quick | track <path> <category> | forget <path> | help",
    )
