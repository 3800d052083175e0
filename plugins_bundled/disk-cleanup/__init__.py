"""disk-cleanup: track the ephemeral files agents create, and delete them.

Uses only the public Flowly plugin API (``register(ctx)``, ``register_hook``
with ``flowly.agent.hooks`` contexts, ``register_command``,
``flowly.profile.get_flowly_home``), so it runs unmodified under any host
that implements it.

* ``pre_tool_call`` / ``post_tool_call``: a file is tracked only when the
  agent created it: a ``write_file`` path or a word of an ``exec`` command
  line at which nothing existed before the call and a new regular file does
  after it (``calls`` has the exact rules). Files the agent only edits or
  rewrites, and paths that merely appear in a tool's output, are never
  tracked. Of those, the ones that look ephemeral (test scripts, temp
  outputs) and lie under the home or ``/tmp/plughost-*`` are kept in the
  state (``tracker``).
* ``on_session_end``: the test files created during that session are
  deleted, emptied directories removed, and one line is logged to
  ``<home>/disk-cleanup/cleanup.log`` — for a session that ran a tool that
  can create a file (``write_file``, ``exec``) here, or had files tracked.
  A session that did neither (an API request that only called other tools)
  costs a ``stat`` and writes nothing: its end is not worth a log line.
* ``/disk-cleanup status | dry-run | quick | track <path> <category> |
  forget <path> | help``.

Nothing here ever raises into the host: every entry point catches and logs.
"""

from __future__ import annotations


from .toolnames import SNAPSHOT_TOOLS

# ``calls``, ``cleaner``, ``safety`` and ``tracker`` are imported when a
# hook or the command first needs them: most starts (``plugins list``, a
# turn without file tools) never do.


_loaded = None


def _modules():
    global _loaded
    if _loaded is None:  # every session end asks: the import machinery once
        from . import cleaner, safety, tracker

        _loaded = (cleaner, safety, tracker)
    return _loaded


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


#: Sessions that ran a tool that can create a file (``SNAPSHOT_TOOLS``)
#: in this process since their last ``on_session_end``: their end is logged
#: even when nothing was tracked.
_ran_file_tools: "set[str]" = set()


def _on_pre_tool_call(ctx) -> None:
    if getattr(ctx, "tool_name", "") not in SNAPSHOT_TOOLS:
        return  # the call can create no file this plugin tracks: no snapshot
    from . import calls

    if len(_ran_file_tools) > 4096:
        _ran_file_tools.clear()  # sessions that never ended: only their log line is lost
    _ran_file_tools.add(getattr(ctx, "session_id", "") or "")
    try:
        calls.before(ctx)
    except Exception:  # a failing hook must never break the agent loop
        _logger().exception("disk-cleanup: pre_tool_call snapshot failed")


def _on_post_tool_call(ctx) -> None:
    if getattr(ctx, "tool_name", "") not in SNAPSHOT_TOOLS:
        return  # never snapshotted (see _on_pre_tool_call): nothing to compare
    from . import calls

    _, safety, tracker = _modules()
    try:
        new = calls.created(ctx)
        if not new:
            return
        roots = safety.Roots.current()
        wanted = []
        for path in new:
            category = safety.categorize(path, roots)
            if category is not None and roots.may_delete(path):
                wanted.append((path, category))
        if not wanted:
            return
        session = getattr(ctx, "session_id", "") or ""
        with tracker.locked():
            state = tracker.load()
            added = sum(tracker.track(state, path, category, session, "created") for path, category in wanted)
            if added:
                tracker.save(state)
        _logger().debug("disk-cleanup: tracking %d new file(s)", added)
    except tracker.Busy as exc:
        _logger().warning("disk-cleanup: not tracking %s: %s", ", ".join(p for p, _ in wanted), exc)
    except Exception:  # a failing hook must never break the agent loop
        _logger().exception("disk-cleanup: post_tool_call tracking failed")


def _on_session_end(ctx) -> None:
    cleaner, _, tracker = _modules()
    session = getattr(ctx, "session_id", "") or ""
    ran = session in _ran_file_tools
    _ran_file_tools.discard(session)
    try:
        result = cleaner.clean_session(session)
        if result is None and not ran:
            return  # nothing tracked, nothing that could have made a file
        cleaner.log_line(f"session={session or '-'} {(result or cleaner.Result()).summary()}")
    except tracker.Busy as exc:
        _logger().warning("disk-cleanup: session %s not cleaned up (its files stay tracked): %s", session or "-", exc)
    except Exception:
        _logger().exception("disk-cleanup: session-end cleanup failed")


def _handle_slash(raw_args: str) -> str:
    cleaner, _, tracker = _modules()
    try:
        return cleaner.command(raw_args)
    except tracker.Busy as exc:
        return f"disk-cleanup: {exc}"
    except Exception as exc:
        _logger().exception("disk-cleanup: /disk-cleanup %s failed", raw_args)
        return f"disk-cleanup failed: {type(exc).__name__}: {exc}"


# The tools the tool hooks look at: plughost does not call them for others
# (a host that does not know the attribute calls them; they return at once).
_on_pre_tool_call.__plughost_tools__ = _on_post_tool_call.__plughost_tools__ = tuple(sorted(SNAPSHOT_TOOLS))


def register(ctx) -> None:
    ctx.register_hook("pre_tool_call", _on_pre_tool_call)
    ctx.register_hook("post_tool_call", _on_post_tool_call)
    ctx.register_hook("on_session_end", _on_session_end)
    ctx.register_command(
        "disk-cleanup",
        handler=_handle_slash,
        description="Track and clean up ephemeral session files.",
        args_hint="status | dry-run | quick | track <path> <category> | forget <path> | help",
    )
