"""``tools.interrupt`` compat (plughost): Hermes's per-thread interrupt flag.

Hermes sets it when the user stops a turn (``/stop``) and long-running tools
poll ``is_interrupted()``. plughost interrupts a turn by cancelling it, and
never sets this flag itself: ``is_interrupted()`` is ``True`` only after
``set_interrupt(True)`` on the same thread (a plugin's own use).
"""

from __future__ import annotations

import threading

_FLAGS: "dict[int, bool]" = {}
_LOCK = threading.Lock()


def set_interrupt(active: bool, thread_id=None) -> None:
    tid = threading.get_ident() if thread_id is None else thread_id
    with _LOCK:
        if active:
            _FLAGS[tid] = True
        else:
            _FLAGS.pop(tid, None)


def is_interrupted(thread_id=None) -> bool:
    tid = threading.get_ident() if thread_id is None else thread_id
    with _LOCK:
        return _FLAGS.get(tid, False)
