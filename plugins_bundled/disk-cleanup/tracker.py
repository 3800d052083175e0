"""The tracking state: ``<home>/disk-cleanup/tracked.json``.

Written atomically (temp file, fsync, rename) with the previous version kept
as ``tracked.json.bak``; a corrupt file is recovered from that backup, and a
file that cannot be recovered is set aside, never silently overwritten.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from . import safety

logger = logging.getLogger(__name__)
VERSION = 1


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
        logger.warning("disk-cleanup: %s is unreadable (%s); trying the backup", path, exc)
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        try:
            os.replace(path, aside)
        except OSError:
            pass
    try:
        data = _read(backup)
        logger.warning("disk-cleanup: recovered tracking state from %s", backup)
        save(data, keep_backup=False)
        return data
    except (OSError, ValueError):
        logger.warning("disk-cleanup: no usable backup; starting with empty tracking state")
        return _empty()


def save(state: dict, keep_backup: bool = True) -> None:
    import json

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


def track(state: dict, path: str, category: str, session: str) -> bool:
    """Add ``path``; False when it was already tracked under that category."""
    files = state.setdefault("files", {})
    current = files.get(path)
    if current and current.get("category") == category:
        return False
    files[path] = {"category": category, "session": session, "tracked_at": round(time.time(), 3)}
    return True


def forget(state: dict, path: str) -> bool:
    return state.get("files", {}).pop(path, None) is not None
