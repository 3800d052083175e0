"""Planning and doing deletions: session-end cleanup, quick, dry-run, and
the ``/disk-cleanup`` command."""

from __future__ import annotations

import os
import stat
import time

from . import safety, tracker


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


DAY = 86400
#: Shown beside a legacy entry, which is never deleted.
UNVERIFIED = "  (unverified: tracked by an earlier version; `track` it to confirm, `forget` it to drop)"
MAX_AGE = {"temp": 7 * DAY, "cron": 14 * DAY}

HELP = """/disk-cleanup — track and clean up ephemeral session files

  status                      what is tracked, by category
  dry-run                     list exactly what `quick` would delete; deletes nothing
  quick                       delete tracked test files now, temp files older than 7 days,
                              cron outputs older than 14 days, and empty directories
  track <path> <category>     track a file (category: test, temp or cron)
  forget <path>               stop tracking a file (the file is kept)
  help                        this text

Only files the agent created are tracked by the hooks: write_file or exec
paths that were not there before the call. Only files under the plughost
home or /tmp/plughost-* are touched; the home's plugins/, sessions/, skills/
and config.json never are."""


class Plan:
    """What a cleanup will delete."""

    def __init__(self) -> None:
        self.files: list[tuple[str, str, int]] = []  # path, category, size
        self.dirs: list[str] = []
        self.stale: list[str] = []  # tracked, but already gone
        self.held: list[tuple[str, str]] = []  # path, category: legacy, never deleted


class Result:
    """What a cleanup did."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.dirs: list[str] = []
        self.freed = 0
        self.errors: list[str] = []

    def summary(self) -> str:
        text = f"deleted={len(self.deleted)} freed={_size(self.freed)} dirs={len(self.dirs)}"
        return text + (f" errors={len(self.errors)}" if self.errors else "")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _lstat(path: str):
    try:
        return os.lstat(path)
    except OSError:
        return None


def _due(category: str, st, now: float) -> bool:
    if category == "test":
        return True
    return now - st.st_mtime > MAX_AGE.get(category, float("inf"))


def _empty_dirs(roots: safety.Roots, gone: set[str]) -> list[str]:
    """Directories under the roots that are empty once the files in ``gone``
    are deleted, deepest first; never a root, a protected place, or a
    symlink."""
    found: list[str] = []

    def visit(directory: str) -> bool:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return False
        empty = True
        for entry in entries:
            if entry.path in gone:
                continue
            if entry.is_dir(follow_symlinks=False) and not roots.is_protected(entry.path):
                if visit(entry.path) and roots.may_delete(entry.path):
                    found.append(entry.path)
                    continue
            empty = False
        return empty

    for root in roots.all:
        if os.path.isdir(root) and not os.path.islink(root):
            visit(root)
    return found


def _emptied_parents(gone: set[str], roots: safety.Roots) -> list[str]:
    """The parent directories (and their parents) that deleting ``gone`` empties."""
    out: list[str] = []
    for start in sorted({os.path.dirname(p) for p in gone}, key=len, reverse=True):
        directory = start
        while roots.may_delete(directory) and os.path.isdir(directory) and not os.path.islink(directory):
            try:
                left = [e for e in os.listdir(directory) if os.path.join(directory, e) not in gone and os.path.join(directory, e) not in out]
            except OSError:
                break
            if left:
                break
            if directory not in out:
                out.append(directory)
            directory = os.path.dirname(directory)
    return out


def plan(state: dict, roots: safety.Roots, now: float | None = None, session: str | None = None) -> Plan:
    """Exactly what `quick` deletes (dry-run prints this very plan); with
    ``session``, what the session-end cleanup deletes: that session's test
    files and the directories they leave empty. Legacy entries (see
    ``tracker``) are held, never deleted."""
    now = time.time() if now is None else now
    result = Plan()
    for path, entry in sorted(state.get("files", {}).items()):
        category = entry.get("category", "temp")
        if session is not None and (category != "test" or entry.get("session") != session):
            continue
        st = _lstat(path)
        if st is None:
            result.stale.append(path)
            continue
        if tracker.origin(entry) == "legacy":
            result.held.append((path, category))
            continue
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) or not roots.may_delete(path):
            continue
        if _due(category, st, now):
            result.files.append((path, category, st.st_size if stat.S_ISREG(st.st_mode) else 0))
    gone = {path for path, _, _ in result.files}
    result.dirs = _emptied_parents(gone, roots) if session is not None else _empty_dirs(roots, gone)
    return result


def execute(state: dict, roots: safety.Roots, todo: Plan) -> Result:
    done = Result()
    for path, _category, size in todo.files:
        if not roots.may_delete(path):  # re-checked at the moment of deletion
            continue
        try:
            os.unlink(path)  # unlink never follows a symlink
            done.deleted.append(path)
            done.freed += size
        except FileNotFoundError:
            pass
        except OSError as exc:
            done.errors.append(f"{path}: {exc}")
            continue
        tracker.forget(state, path)
    for path in todo.stale:
        tracker.forget(state, path)
    for directory in todo.dirs:
        if not roots.may_delete(directory) or os.path.islink(directory):
            continue
        try:
            os.rmdir(directory)  # only ever removes an empty directory
            done.dirs.append(directory)
        except OSError:
            pass
    return done


#: ``(stamp of tracked.json, sessions with test entries in it)``, so a
#: session that tracked nothing ends without the lock, the state's read and
#: the roots' glob (every session end of a server runs this).
_sessions_of_state: "tuple[tuple, frozenset] | None" = None


def _may_have_files(session: str) -> bool:
    """False only when the state surely holds no test file of ``session``:
    no state file (nor backup), or one whose test entries, read before at
    the same inode, size and modification time, name other sessions. The
    state file is replaced by rename, so reading it unlocked sees a whole
    version; the cleanup itself reads it again under the lock."""
    global _sessions_of_state
    path = _paths()[0]
    # ``access`` first: no state file is the common case, and a failing
    # ``stat`` costs a Python exception where ``access`` returns False.
    if not os.access(path, os.F_OK):
        return os.access(path + ".bak", os.F_OK)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return os.access(path + ".bak", os.F_OK)
    except OSError:
        return True
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if _sessions_of_state is None or _sessions_of_state[0] != stamp:
        try:
            files = tracker._read(path)["files"]
        except (OSError, ValueError):
            return True  # the locked load recovers it
        sessions = frozenset(
            e.get("session") for e in files.values() if isinstance(e, dict) and e.get("category", "temp") == "test"
        )
        _sessions_of_state = (stamp, sessions)
    return session in _sessions_of_state[1]


def clean_session(session: str) -> "Result | None":
    """Delete ``session``'s tracked test files; ``None`` when the state
    surely holds none of them (nothing was read or locked)."""
    if not _may_have_files(session):
        return None
    roots = safety.Roots.current()
    with tracker.locked():
        state = tracker.load()
        todo = plan(state, roots, session=session)
        done = execute(state, roots, todo)
        if done.deleted or todo.stale:
            tracker.save(state)
    return done


#: ``(home, (state file, log file))``: the paths of the last home seen.
_home_paths: "tuple[object, tuple[str, str]] | None" = None
#: ``flowly.profile.get_flowly_home``, imported at the first session end.
_get_home = None


def _paths() -> "tuple[str, str]":
    """``tracked.json`` and ``cleanup.log`` of this host's home, as strings
    (made once per home: every session end asks)."""
    global _home_paths, _get_home
    if _get_home is None:
        from flowly.profile import get_flowly_home

        _get_home = get_flowly_home
    home = _get_home()
    # ``is`` first: a host returns the same ``Path`` for the same home, and
    # comparing two ``Path``s builds their parts.
    if _home_paths is None or (_home_paths[0] is not home and _home_paths[0] != home):
        _home_paths = (home, (str(tracker.state_file()), str(tracker.state_dir() / "cleanup.log")))
    return _home_paths[1]


#: ``(path, (st_dev, st_ino), open handle)`` of the log, kept open between lines.
_log = None


def log_line(text: str) -> None:
    """Append one line to ``cleanup.log``, written through before returning,
    through a handle kept open (reopened when the file was removed or
    replaced, or the home changed)."""
    global _log
    path = _paths()[1]
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n"
    try:
        if _log is not None and (_log[0] != path or _identity(path) != _log[1]):
            _log[2].close()
            _log = None
        if _log is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fh = open(path, "a", encoding="utf-8")
            st = os.fstat(fh.fileno())
            _log = (path, (st.st_dev, st.st_ino), fh)
        _log[2].write(line)
        _log[2].flush()
    except OSError as exc:
        _log = None
        _logger().warning("disk-cleanup: cannot write %s: %s", path, exc)


def _identity(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def command(raw_args: str) -> str:
    args = raw_args.split()
    sub = args[0].lower() if args else "help"
    if sub == "status":
        return _status()
    if sub in ("dry-run", "dryrun", "dry_run"):
        return _dry_run()
    if sub == "quick":
        roots = safety.Roots.current()
        with tracker.locked():
            state = tracker.load()
            done = execute(state, roots, plan(state, roots))
            tracker.save(state)
        log_line(f"quick {done.summary()}")
        lines = [f"Deleted {len(done.deleted)} file(s), freed {_size(done.freed)}, removed {len(done.dirs)} empty director(ies)."]
        lines += [f"  error: {e}" for e in done.errors]
        return "\n".join(lines)
    if sub == "track":
        if len(args) != 3:
            return "Usage: /disk-cleanup track <path> <category>   (category: test, temp or cron)"
        return _track(args[1], args[2].lower())
    if sub == "forget":
        if len(args) != 2:
            return "Usage: /disk-cleanup forget <path>"
        path = safety.absolute(args[1])
        with tracker.locked():
            state = tracker.load()
            if path and tracker.forget(state, path):
                tracker.save(state)
                return f"Forgot {path} (the file is kept)."
        return f"{args[1]} is not tracked."
    return HELP


def _track(raw: str, category: str) -> str:
    if category not in safety.CATEGORIES:
        return f"Unknown category '{category}': use test, temp or cron."
    path = safety.absolute(raw)
    if path is None:
        return f"Give an absolute path (or ~/...), not '{raw}'."
    if not safety.is_regular_file(path):
        return f"Not tracked: {path} is not a regular file."
    roots = safety.Roots.current()
    if not roots.may_delete(path):
        return (
            f"Not tracked: {path} is outside the plughost home and /tmp/plughost-*, "
            "reached through a symlink that leaves them, or in a protected place."
        )
    with tracker.locked():
        state = tracker.load()
        tracker.track(state, path, category, "", "manual")
        tracker.save(state)
    return f"Tracking {path} as {category}."


def _status() -> str:
    roots = safety.Roots.current()
    with tracker.locked():
        files = tracker.load().get("files", {})
    lines = [f"Roots: {', '.join(roots.all)}", f"State: {tracker.state_file()}"]
    if not files:
        lines.append("Nothing tracked.")
        return "\n".join(lines)
    by_category: dict[str, list[str]] = {}
    total = 0
    for path, entry in files.items():
        by_category.setdefault(entry.get("category", "temp"), []).append(path)
        st = _lstat(path)
        total += st.st_size if st and stat.S_ISREG(st.st_mode) else 0
    counts = ", ".join(f"{c}: {len(v)}" for c, v in sorted(by_category.items()))
    lines.append(f"Tracked {len(files)} file(s) ({counts}), {_size(total)} on disk.")
    for path in sorted(files)[:20]:
        missing = "" if _lstat(path) else "  (gone)"
        unverified = UNVERIFIED if tracker.origin(files[path]) == "legacy" else ""
        lines.append(f"  [{files[path].get('category')}] {path}{missing}{unverified}")
    if len(files) > 20:
        lines.append(f"  … and {len(files) - 20} more")
    return "\n".join(lines)


def _dry_run() -> str:
    roots = safety.Roots.current()
    with tracker.locked():
        state = tracker.load()
    todo = plan(state, roots)
    dirs = todo.dirs
    held = [f"  held [{category}] {path}{UNVERIFIED}" for path, category in todo.held]
    if not todo.files and not dirs:
        return "\n".join(["Dry run: `quick` would delete nothing.", *held])
    total = sum(size for _, _, size in todo.files)
    lines = [f"Dry run: `quick` would delete {len(todo.files)} file(s) ({_size(total)}) and {len(dirs)} empty director(ies):"]
    lines += [f"  file [{category}] {path}" for path, category, _ in todo.files]
    lines += [f"  dir  {d}" for d in dirs]
    return "\n".join(lines + held)
