"""The tracking state: ``<home>/disk-cleanup/tracked.json``.

Written atomically (temp file, fsync, rename) with the previous version kept
as ``tracked.json.bak``; a corrupt file is recovered from that backup, and a
file that cannot be recovered is set aside, never silently overwritten.
Every read-modify-write runs under :func:`locked`, so the concurrent tool
calls of one turn (and other processes on the same home) never lose each
other's entries.

Format (version 2): ``{"version": 2, "files": {path: {"category", "session",
"tracked_at", "origin"}}}``. ``origin`` is ``created`` (the hooks saw the
agent create the file), ``manual`` (``/disk-cleanup track``) or ``legacy``.
Version 1 had no ``origin``: its entries with a session were tracked by
hooks that also took paths from command output and from files the agent
only edited, so they may be the user's own files. They read as ``legacy``
and are never deleted (status and dry-run list them as unverified; ``track``
confirms one, ``forget`` drops it). Entries without a session were tracked
by hand and read as ``manual``. Nothing is rewritten on load.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from . import safety


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


VERSION = 2
ORIGINS = ("created", "manual", "legacy")
#: How long a state change waits for another one to finish, in seconds.
LOCK_WAIT = 5.0

_thread_lock = threading.Lock()


class Busy(Exception):
    """The state stayed locked by another thread or process for LOCK_WAIT."""


def state_dir() -> Path:
    return safety.home() / "disk-cleanup"


def state_file() -> Path:
    return state_dir() / "tracked.json"


def _empty() -> dict:
    return {"version": VERSION, "files": {}}


def _read(path: Path) -> dict:
    import json  # on first use: plugin start-up stays cheap

    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ValueError("not a disk-cleanup state file")
    return data


def load() -> dict:
    path = state_file()
    backup = path.with_name(path.name + ".bak")
    if not path.exists() and not backup.exists():
        return _empty()
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        _logger().warning("disk-cleanup: %s is unreadable (%s); trying the backup", path, exc)
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        try:
            os.replace(path, aside)
        except OSError:
            pass
    try:
        data = _read(backup)
        _logger().warning("disk-cleanup: recovered tracking state from %s", backup)
        save(data, keep_backup=False)
        return data
    except (OSError, ValueError):
        _logger().warning("disk-cleanup: no usable backup; starting with empty tracking state")
        return _empty()


@contextmanager
def locked(wait: float = LOCK_WAIT):
    """Hold the state for a read-modify-write: a lock per process (threads)
    and ``flock`` on ``tracked.lock`` (processes). Raises :class:`Busy` after
    ``wait`` seconds rather than waiting for ever. When the lock file cannot
    be created (a read-only home), only the process lock is held: nothing
    can be saved there anyway, and saving says so."""
    deadline = time.monotonic() + wait
    if not _thread_lock.acquire(timeout=wait):
        raise Busy(f"the disk-cleanup state stayed locked by another thread for {wait:g} s; try again")
    try:
        fd = None
        try:
            state_dir().mkdir(parents=True, exist_ok=True)
            fd = os.open(state_dir() / "tracked.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            _logger().debug("disk-cleanup: no lock file (%s); locking this process only", exc)
        if fd is None:
            yield
            return
        try:
            import fcntl

            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise Busy(
                            f"{state_dir() / 'tracked.lock'} stayed locked for {wait:g} s "
                            "(another process is using the disk-cleanup state); try again"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # closing releases the flock
    finally:
        _thread_lock.release()


def save(state: dict, keep_backup: bool = True) -> None:
    import json

    state["version"] = VERSION

    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    if keep_backup and path.exists():
        try:
            os.replace(path, path.with_name(path.name + ".bak"))
        except OSError:
            pass
    os.replace(tmp, path)


def track(state: dict, path: str, category: str, session: str, how: str) -> bool:
    """Add ``path`` (``how``: ``created`` or ``manual``); False when it was
    already tracked that way under that category."""
    files = state.setdefault("files", {})
    current = files.get(path)
    if current and current.get("category") == category and origin(current) == how:
        return False
    files[path] = {"category": category, "session": session, "tracked_at": round(time.time(), 3), "origin": how}
    return True


def origin(entry: dict) -> str:
    """How an entry came to be tracked (see the module doc)."""
    value = entry.get("origin")
    if value in ORIGINS:
        return value
    return "legacy" if entry.get("session") else "manual"


def forget(state: dict, path: str) -> bool:
    return state.get("files", {}).pop(path, None) is not None
