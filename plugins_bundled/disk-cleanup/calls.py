"""Which files one tool call created: a snapshot of the paths the call names,
taken in ``pre_tool_call`` and compared in ``post_tool_call``.

A path counts as *created by the call* only when all of these hold:

* the call's parameters name it (``write_file``'s path; for ``exec``, a word
  of the command line), never the tool's output;
* nothing was there (not even a dangling symlink) when ``pre_tool_call`` ran,
  and the parameters still name it when ``post_tool_call`` runs;
* it is a regular file afterwards;
* it is not a file the call only moved or linked into place: its inode is not
  one another named path had before (``mv notes.py test_notes.py``), and its
  modification time is not older than the call (``mv``, ``cp -p`` and
  unpacking keep an old one).

``edit_file`` never creates a file, so it is never snapshotted. Relative
paths resolve in the ``cwd`` parameter of ``exec`` when given, else in
``<home>/workspace`` (the agent's default workspace); a ``cd`` inside a
command is not followed, so what it creates elsewhere stays untracked.

Several calls of one turn may run at once, so a snapshot belongs to its call:
it is kept on the call's hook context object (a host passes the same
``ToolHookContext`` to the pre and post hooks of one call, and each call has
its own), and, when the host gives a ``tool_call_id``, in a small table keyed
by (session, call id, tool) for a host that builds a new context per event.
A call whose snapshot is not found created nothing, as far as this plugin is
concerned: unknown means keep.
"""

from __future__ import annotations

import os
import stat
import threading
import time

from . import safety

from .toolnames import CWD_PARAMS, EXEC_TOOLS, SNAPSHOT_TOOLS, WRITE_TOOLS  # noqa: F401

#: How much older than the call a new file's mtime may be (coarse
#: filesystem timestamps, a clock a little behind) and still be the call's.
MTIME_SLACK = 2.0
#: Snapshots kept for calls whose post hook never came (blocked calls).
MAX_PENDING = 256

_ATTR = "_disk_cleanup_snapshot"
_pending: dict = {}
_pending_lock = threading.Lock()


class Snapshot:
    """What the paths named by one call were before it ran."""

    __slots__ = ("started", "existed", "inodes")

    def __init__(self) -> None:
        self.started = time.time()
        self.existed: dict[str, bool] = {}
        self.inodes: set[tuple[int, int]] = set()


def workspace() -> str:
    """Where a relative path of a file tool lands by default."""
    return os.path.join(os.path.realpath(safety.home()), "workspace")


def named_paths(tool: str, params) -> list[str]:
    """The absolute paths ``params`` of a ``tool`` call name."""
    if not isinstance(params, dict):
        return []
    if tool in WRITE_TOOLS:
        raws = [params[k] for k in WRITE_TOOLS[tool] if isinstance(params.get(k), str)]
        base = workspace()
    elif tool in EXEC_TOOLS:
        command = next((params[k] for k in EXEC_TOOLS[tool] if isinstance(params.get(k), str)), "")
        raws = safety.paths_in_command(command)
        cwd = next((params[k] for k in CWD_PARAMS if isinstance(params.get(k), str) and params[k]), None)
        base = safety.absolute(cwd, workspace()) if cwd else workspace()
    else:
        return []
    out: list[str] = []
    for raw in raws:
        path = safety.absolute(raw, base)
        if path is not None and path not in out:
            out.append(path)
    return out


def before(ctx) -> None:
    """``pre_tool_call``: note what is at each path the call names."""
    paths = named_paths(getattr(ctx, "tool_name", ""), getattr(ctx, "params", None))
    if not paths:
        return
    snap = Snapshot()
    for path in paths:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            snap.existed[path] = False
            continue
        except (OSError, ValueError):
            snap.existed[path] = True  # cannot tell: count it as there
            continue
        snap.existed[path] = True
        snap.inodes.add((st.st_dev, st.st_ino))
    _stash(ctx, snap)


def created(ctx) -> list[str]:
    """``post_tool_call``: the paths this call created (see the module doc)."""
    snap = _take(ctx)
    if snap is None or getattr(ctx, "success", None) is False:
        return []
    still_named = set(named_paths(getattr(ctx, "tool_name", ""), getattr(ctx, "params", None)))
    out = []
    for path, existed in snap.existed.items():
        if existed or path not in still_named:
            continue
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in snap.inodes:
            continue
        if st.st_mtime < snap.started - MTIME_SLACK:
            continue
        out.append(path)
    return out


def _key(ctx):
    call_id = getattr(ctx, "tool_call_id", "")
    if not isinstance(call_id, str) or not call_id:
        return None
    return (str(getattr(ctx, "session_id", "") or ""), call_id, str(getattr(ctx, "tool_name", "") or ""))


def _stash(ctx, snap: Snapshot) -> None:
    try:
        setattr(ctx, _ATTR, snap)
    except (AttributeError, TypeError):
        pass  # a context without a __dict__: the table below only
    key = _key(ctx)
    if key is None:
        return
    with _pending_lock:
        _pending.pop(key, None)
        _pending[key] = snap
        while len(_pending) > MAX_PENDING:
            _pending.pop(next(iter(_pending)))


def _take(ctx) -> Snapshot | None:
    key = _key(ctx)
    snap = None
    if key is not None:
        with _pending_lock:
            snap = _pending.pop(key, None)
    own = getattr(ctx, _ATTR, None)
    if isinstance(own, Snapshot):
        snap = own  # the call's own object: cannot be another call's
        try:
            delattr(ctx, _ATTR)
        except (AttributeError, TypeError):
            pass
    return snap
