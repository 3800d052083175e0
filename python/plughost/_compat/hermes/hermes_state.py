"""``hermes_state`` compat (plughost): the SQLite helper Hermes's plugins
import from Hermes's session store (``hermes_state.py``).

plughost keeps no Hermes ``state.db``; what is here is what plugins use on
databases of their own: ``apply_wal_with_fallback`` (holographic's
``MemoryStore`` opens its store with it), with Hermes's behaviour.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Optional, Set

logger = logging.getLogger(__name__)

# SQLite's result codes for what a filesystem without WAL support answers
# (NFS/SMB: SQLITE_PROTOCOL, "locking protocol"; some FUSE mounts refuse the
# pragma: SQLITE_AUTH, "not authorized").
_WAL_INCOMPATIBLE_CODES = (
    getattr(sqlite3, "SQLITE_PROTOCOL", 15),
    getattr(sqlite3, "SQLITE_AUTH", 23),
)

_warned: Set[str] = set()
_warned_lock = threading.Lock()


def _on_disk_journal_mode(conn: sqlite3.Connection) -> Optional[str]:
    """The journal mode the database reports (``"wal"``, ``"delete"``, …),
    or ``None`` when it cannot be read."""
    try:
        row = conn.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None or row[0] is None:
        return None
    mode = row[0]
    if isinstance(mode, bytes):
        try:
            mode = mode.decode("ascii")
        except UnicodeDecodeError:
            return None
    return str(mode).strip().lower()


def _wal_incompatible(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) in _WAL_INCOMPATIBLE_CODES


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Put ``conn``'s database in WAL mode and return the mode set
    (``"wal"``, or ``"delete"``): a database already in WAL is left as it is;
    on a filesystem without WAL support it falls back to DELETE (warning
    once per ``db_label``), unless the database is in WAL already (then the
    error is raised). Any other error is raised."""
    try:
        current = conn.execute("PRAGMA journal_mode").fetchone()
        if current and current[0] == "wal":
            return "wal"
    except sqlite3.OperationalError:
        pass
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        return "wal"
    except sqlite3.OperationalError as exc:
        if not _wal_incompatible(exc):
            raise
        if _on_disk_journal_mode(conn) == "wal":
            raise
        _warn_once(db_label, exc)
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"


def _warn_once(db_label: str, exc: Exception) -> None:
    with _warned_lock:
        if db_label in _warned:
            return
        _warned.add(db_label)
    logger.warning(
        "%s: WAL journal_mode unsupported on this filesystem (%s) — falling back to "
        "journal_mode=DELETE (slower rollback-journal mode; reduces concurrency but works on "
        "NFS/SMB/FUSE). See https://www.sqlite.org/wal.html for details. This warning fires "
        "once per process per database.",
        db_label,
        exc,
    )
