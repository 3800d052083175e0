"""``gateway.status`` compat (plughost): no Hermes gateway runs under plughost.

``is_gateway_running`` is False and there is no runtime status to read;
scoped locks are real (a lock file per scope under the Hermes home, held
by this process), so two processes still never share one credential.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hermes_constants import get_hermes_home

_RUNTIME_STATUS: dict = {}


def is_gateway_running() -> bool:
    return False


def get_running_pid():
    return None


def read_runtime_status():
    return dict(_RUNTIME_STATUS) or None


def write_runtime_status(**fields) -> None:
    """Kept in this process (plughost has no gateway status file)."""
    _RUNTIME_STATUS.update({k: v for k, v in fields.items() if v is not None})


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def get_process_start_time(pid: int):
    """Clock ticks since boot when ``pid`` started (``/proc``), else None."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def terminate_pid(pid: int, force: bool = False) -> None:
    import signal

    try:
        os.kill(int(pid), signal.SIGKILL if force else signal.SIGTERM)
    except ProcessLookupError:
        pass


def _get_lock_dir() -> Path:
    return get_hermes_home() / "gateway-locks"


def _scope_hash(scope: str, identity: str) -> str:
    return hashlib.sha256(f"{scope}\0{identity}".encode()).hexdigest()[:16]


def _get_scope_lock_path(scope: str, identity: str) -> Path:
    return _get_lock_dir() / f"{scope}-{_scope_hash(scope, identity)}.lock"


def acquire_scoped_lock(scope: str, identity: str, metadata=None):
    """``(True, None)`` when this process now holds the lock, else
    ``(False, record)`` naming the live holder. A dead holder's lock is taken over."""
    path = _get_scope_lock_path(scope, identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "scope": scope, "metadata": metadata or {}}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            try:
                existing = json.loads(path.read_text())
            except (OSError, ValueError):
                existing = {}
            holder = existing.get("pid")
            if holder == os.getpid():
                return True, None
            if isinstance(holder, int) and _pid_exists(holder):
                return False, existing
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        return True, None
    return False, None


def release_scoped_lock(scope: str, identity: str) -> None:
    path = _get_scope_lock_path(scope, identity)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
