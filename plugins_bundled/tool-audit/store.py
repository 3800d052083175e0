"""The audit log file: append, read back, summarise.

Appending stays off the tool-call path: a record is queued in memory and a
writer thread appends what is queued to ``calls.jsonl`` at most
:data:`FLUSH_INTERVAL` seconds later, through one file handle opened on the
first record (reopened when the file was removed or replaced meanwhile).
Reading (``audit_summary``, ``/audit``) writes out what is queued first, so
a read sees every call before it.

What is on disk, when:

* **clean exit**: every queued record.  The log is written out when its
  :class:`AuditLog` goes away (its host is dropped: the ``plughost`` command
  drops its host before it exits) and from ``atexit`` (a Python process
  using the wheel);
* **SIGKILL, a crash of the process, ``os._exit``** (an isolated worker
  whose host went away ends this way): the records queued in the last
  :data:`FLUSH_INTERVAL` seconds at most; what was written before is in the
  file (the kernel has it; an OS crash or power loss can lose what it had
  not written to the disk yet, as before).

The file's format is unchanged: one JSON object per line, keys sorted.

Under plughost the log is plughost's native ``ToolCallLog`` instead (same
file, same lines, same guarantees): the host records a call into it without
entering Python, and a Rust thread writes. Another Flowly host gets the
Python writer below.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from pathlib import Path


def _logger():
    """This module's logger, on first use: importing ``logging`` costs
    milliseconds at start-up, and most runs never log here."""
    import logging

    return logging.getLogger(__name__)


#: How long a record may wait in memory before the writer appends it.
FLUSH_INTERVAL = 0.1


def log_path() -> Path:
    from flowly.profile import get_flowly_home

    return Path(get_flowly_home()) / "tool-audit" / "calls.jsonl"


_encoder = None
_quote = None


def encode(ts: float, tool, session_id, duration_ms, success) -> str:
    """One record's line (without its newline), as it always was:
    ``json.dumps(record, sort_keys=True)`` of ts, tool, session_id,
    duration_ms and success.  The usual record (two strings, two finite
    floats) is formatted directly, the same text at a fraction of the cost
    (the writer formats every call); anything else goes through ``json``."""
    global _encoder, _quote
    if _encoder is None:
        import json  # on first use: plugin start-up stays cheap
        from json.encoder import encode_basestring_ascii

        _encoder = json.JSONEncoder(sort_keys=True)
        _quote = encode_basestring_ascii
    ts = round(ts, 3)
    duration_ms = round(float(duration_ms or 0.0), 3)
    success = bool(success)
    if (
        type(tool) is str
        and type(session_id) is str
        and ts - ts == 0.0  # finite: json writes NaN and Infinity its own way
        and duration_ms - duration_ms == 0.0
    ):
        return (
            f'{{"duration_ms": {duration_ms!r}, "session_id": {_quote(session_id)}, '
            f'"success": {"true" if success else "false"}, "tool": {_quote(tool)}, "ts": {ts!r}}}'
        )
    record = {"ts": ts, "tool": tool, "session_id": session_id, "duration_ms": duration_ms, "success": success}
    return _encoder.encode(record)


class _Sink:
    """The queue and the open file, shared by an :class:`AuditLog` and its
    writer thread (which holds this, never the log, so the log can go)."""

    def __init__(self) -> None:
        self.queue: deque = deque()
        self.lock = threading.RLock()  # one writer at a time; reentrant for a GC-run close
        self.wake = threading.Event()
        self.armed = False  # the writer was woken for what is queued
        self.closed = False
        self.path: Path | None = None
        self.fh = None
        self.thread: threading.Thread | None = None

    def add(self, record: tuple) -> None:
        self.queue.append(record)
        if not self.armed:
            self.armed = True
            self.wake.set()

    def run(self) -> None:
        while not self.closed:
            self.wake.wait()
            time.sleep(FLUSH_INTERVAL)  # gather the calls of a burst into one write
            self.wake.clear()
            self.armed = False
            self.flush()

    def flush(self) -> None:
        """Append everything queued to the file."""
        with self.lock:
            if not self.queue:
                return
            lines = []
            while self.queue:
                record = self.queue.popleft()
                try:
                    lines.append(encode(*record) + "\n")
                except (TypeError, ValueError) as exc:  # a value JSON cannot hold
                    _logger().warning("skipping an audit record of %r that cannot be written: %s", record[1], exc)
            if not lines:
                return
            path = self.path
            try:
                fh = self._open()
                fh.write("".join(lines))
                fh.flush()
            except OSError as exc:  # never break the agent loop over an audit line
                self._drop_handle()
                _logger().warning("could not write %d audit record(s) to %s: %s", len(lines), path, exc)

    def _open(self):
        """The handle, (re)opened when the file is not the one it has open."""
        path = self.path
        if self.fh is not None:
            try:
                on_disk = os.stat(path)
                held = os.fstat(self.fh.fileno())
                if (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino):
                    return self.fh
            except OSError:
                pass
            self._drop_handle()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "a", encoding="utf-8")
        return self.fh

    def _drop_handle(self) -> None:
        fh, self.fh = self.fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.flush()
            self._drop_handle()
        self.wake.set()  # the writer sees `closed` and ends


def _flush_at_exit(ref) -> None:
    sink = ref()
    if sink is not None:
        sink.close()


def _native_log(skip: "tuple[str, ...]"):
    """plughost's ``ToolCallLog`` of :func:`log_path` (closed at exit), or
    ``None`` when the host is not plughost."""
    try:
        from _plughost_native import ToolCallLog
    except ImportError:
        return None
    import atexit
    import weakref

    log = ToolCallLog(str(log_path()), skip=list(skip))
    atexit.register(_flush_at_exit, weakref.ref(log))
    return log


class AuditLog:
    """One plugin load's audit log (see the module doc for when what is on disk)."""

    def __init__(self, skip: "tuple[str, ...]" = ()) -> None:
        self._sink = _Sink()
        #: plughost's native log (the ``post_tool_call`` hook to register),
        #: or ``None`` under another host.
        self.native = _native_log(skip)

    def append(self, tool, session_id, duration_ms, success) -> None:
        """Queue one finished call; the writer appends it shortly."""
        if self.native is not None:
            self.native.record(tool, session_id, float(duration_ms or 0.0), bool(success))
            return
        sink = self._sink
        if sink.thread is None:
            self._start(sink)
        sink.add((time.time(), tool, session_id, duration_ms, success))
        if sink.closed:  # written out already (atexit ran): no writer any more
            sink.flush()

    def _start(self, sink: _Sink) -> None:
        import atexit
        import weakref

        with sink.lock:
            if sink.thread is not None:
                return
            sink.path = log_path()  # resolved in plugin code: this plugin's home
            # A weak reference: a host that goes away frees its log (whose
            # __del__ writes it out) although atexit still lists it.
            atexit.register(_flush_at_exit, weakref.ref(sink))
            sink.thread = threading.Thread(target=sink.run, name="tool-audit writer", daemon=True)
            sink.thread.start()

    def flush(self) -> None:
        (self.native or self._sink).flush()

    def close(self) -> None:
        (self.native or self._sink).close()

    def __del__(self) -> None:
        sink = getattr(self, "_sink", None)
        if sink is not None and sink.thread is not None:
            sink.close()

    def read(self) -> list[dict]:
        import json

        self.flush()
        path = log_path()
        records = []
        try:
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError:
                        _logger().warning("skipping malformed audit line %d of %s", number, path)
        except FileNotFoundError:
            pass
        return records

    def summary(self, limit: int = 10) -> str:
        records = self.read()
        if not records:
            return "No tool calls recorded yet."
        per_tool: dict[str, list[dict]] = {}
        for record in records:
            per_tool.setdefault(str(record.get("tool", "?")), []).append(record)
        ranked = sorted(per_tool.items(), key=lambda item: (-len(item[1]), item[0]))[:limit]
        lines = [f"{len(records)} tool call(s) recorded across {len(per_tool)} tool(s):"]
        for tool, calls in ranked:
            failures = sum(1 for c in calls if not c.get("success"))
            mean = sum(float(c.get("duration_ms", 0.0)) for c in calls) / len(calls)
            lines.append(f"- {tool}: {len(calls)} call(s), {failures} failed, mean {mean:.2f} ms")
        return "\n".join(lines)

    def recent(self, count: int) -> str:
        records = self.read()[-count:]
        if not records:
            return "No tool calls recorded yet."
        lines = []
        for r in records:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(r.get("ts", 0))))
            status = "ok" if r.get("success") else "failed"
            lines.append(f"{when}  {r.get('tool')}  {status}  {r.get('duration_ms')} ms")
        return "\n".join(lines)

    def clear(self) -> int:
        with self._sink.lock:
            count = len(self.read())
            self._sink._drop_handle()
            try:
                os.remove(log_path())
            except FileNotFoundError:
                pass
        return count
