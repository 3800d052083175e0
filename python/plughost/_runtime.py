"""Python half of plughost's embedding: plugin import, logging, asyncio bridge.

Loaded by the Rust runtime as the module ``_plughost_runtime`` (from source
embedded in the binary, so the standalone binary and the wheel share it).
Only the Rust side calls into this module; plugins never see it.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `typing` costs milliseconds at start-up; annotations are strings here
    from typing import Any, Callable

import _plughost_native as _native

#: The plughost home, set by the runtime at start-up.
HOME: str = ""

PLUGIN_PACKAGE = "_plughost_plugins"


# ── Plugin import ────────────────────────────────────────────────


def _plugin_root() -> ModuleType:
    root = sys.modules.get(PLUGIN_PACKAGE)
    if root is None:
        root = ModuleType(PLUGIN_PACKAGE)
        root.__path__ = []  # a package with no files: children are added by spec
        sys.modules[PLUGIN_PACKAGE] = root
    return root


def import_plugin(slug: str, directory: str, init_file: str) -> ModuleType:
    """Import a plugin directory as the package ``_plughost_plugins.<slug>``.

    Each plugin gets its own package, so sibling modules and relative imports
    work and two plugins with a ``util.py`` each never collide.  On failure
    every module the plugin had imported from its package is removed again.
    """
    _plugin_root()
    name = f"{PLUGIN_PACKAGE}.{slug}"
    spec = importlib.util.spec_from_file_location(name, init_file, submodule_search_locations=[directory])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import plugin from {init_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        forget_plugin(slug)
        raise
    return module


def forget_plugin(slug: str) -> None:
    """Drop a plugin's package and submodules from ``sys.modules``."""
    name = f"{PLUGIN_PACKAGE}.{slug}"
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def describe_exception(exc: BaseException) -> str:
    """``<ExceptionType>: <message>`` (just the type when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """Names ``fn`` accepts as keyword arguments; ``None`` when it takes ``**kwargs``.

    Read from the code object when there is one (cheap, no ``inspect``
    import); other callables fall back to ``inspect.signature``.
    """
    target = fn
    code = getattr(target, "__code__", None)
    if code is None and hasattr(target, "__func__"):
        code = getattr(target.__func__, "__code__", None)
    if code is not None:
        if code.co_flags & 0x08:  # CO_VARKEYWORDS
            return None
        positional_only = code.co_posonlyargcount
        names = code.co_varnames[positional_only : code.co_argcount + code.co_kwonlyargcount]
        return frozenset(names)
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    names = set()
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            return None
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            names.add(parameter.name)
    return frozenset(names)


# ── Logging ──────────────────────────────────────────────────────


def install_log_forwarding(level: int) -> None:
    """Send every ``logging`` record to the Rust ``tracing`` subscriber."""
    import logging

    class _ForwardHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                message = record.getMessage()
                if record.exc_info:
                    message = f"{message}\n{self.formatter.formatException(record.exc_info)}"  # type: ignore[union-attr]
                _native.log(record.levelno, record.name, message)
            except Exception:
                self.handleError(record)

    handler = _ForwardHandler()
    handler.setFormatter(logging.Formatter())
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if type(h).__name__ != "_ForwardHandler"]
    root.addHandler(handler)
    root.setLevel(level)


# ── asyncio bridge ───────────────────────────────────────────────

_loop = None
_loop_lock = threading.Lock()


#: Held by the loop thread whenever it runs callbacks (everything but the
#: wait in select), and by a caller taking a coroutine's eager first step.
#: Only one of them runs asyncio code at a time, so an eager step can never
#: interleave with the loop's own task steps (the GIL alone does not ensure
#: that: it may switch threads in the middle of either).
_step_lock = threading.Lock()


class _UnlockWhileSelecting:
    """Selector wrapper: releases ``_step_lock`` only while waiting for I/O."""

    def __init__(self, selector):
        self._selector = selector

    def select(self, timeout=None):
        _step_lock.release()
        try:
            return self._selector.select(timeout)
        finally:
            _step_lock.acquire()

    def __getattr__(self, name):
        return getattr(self._selector, name)


def event_loop():
    """The runtime's asyncio loop, started on a daemon thread on first use."""
    global _loop
    if _loop is not None:
        return _loop
    with _loop_lock:
        if _loop is None:
            asyncio = _asyncio_parts()
            loop = asyncio.new_event_loop()
            loop._selector = _UnlockWhileSelecting(loop._selector)
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                with _step_lock:
                    loop.run_forever()

            threading.Thread(target=run, name="plughost-asyncio", daemon=True).start()
            ready.wait()
            _loop = loop
    return _loop


def _noop() -> None:
    pass


_asyncio = None  # the asyncio module, imported on first use (start-up stays lean)


def _asyncio_parts():
    global _asyncio
    if _asyncio is None:
        import asyncio
        import asyncio.events
        import asyncio.tasks

        _asyncio = asyncio
    return _asyncio


if sys.version_info >= (3, 12):

    def _start_task(loop, coro):
        return _asyncio.Task(coro, loop=loop, eager_start=True)

else:

    def _start_task(loop, coro):
        # Python 3.11 has no eager tasks.  Creating a Task schedules its first
        # step with loop.call_soon; take that handle back off the ready queue
        # and run it here, now, so a coroutine that never suspends finishes
        # without waiting for the loop thread.  If the handle is not where it
        # must be (the loop thread got to it first) the loop runs it as usual.
        task = _asyncio.Task(coro, loop=loop)
        ready = loop._ready
        if ready:
            handle = ready[-1]
            if getattr(handle._callback, "__self__", None) is task:
                ready.pop()
                handle._run()
        return task


#: Set (per thread) by ``Host.acall_tool`` while it takes a call's first
#: step on the caller's own thread: coroutines started then belong to the
#: caller's running loop.  Never set for blocking calls, which would
#: deadlock a loop they block.
_caller = threading.local()


def allow_caller_loop(on: bool) -> None:
    _caller.loop_ok = on


def _run_on_caller_loop(asyncio, caller_loop, coro):
    """Start ``coro`` as an eager task of the caller's running loop, from
    inside that loop's current task (whose place we take for the step, as
    Python 3.12's eager tasks do)."""
    tasks = asyncio.tasks
    current = tasks._current_tasks.get(caller_loop)
    if current is not None:
        tasks._leave_task(caller_loop, current)
    try:
        task = _start_task(caller_loop, coro)
    finally:
        if current is not None:
            tasks._enter_task(caller_loop, current)
    if task.done():
        return True, task.result()
    return False, task


def run_eager(coro):
    """Start ``coro`` as a task on the runtime loop, taking its first step here.

    Returns ``(True, result)`` when the coroutine finished without suspending
    (no thread hop at all) and raises its exception if it failed; otherwise
    ``(False, task)``: pass the task to :func:`watch`.  The first step runs on
    the calling thread under the GIL, inside a real Task with the loop marked
    as running (``current_task()`` and ``get_running_loop()`` work), exactly
    like a Python 3.12 eager task.  If the loop thread is busy running
    callbacks at this moment, the coroutine is simply handed to the loop.
    """
    asyncio = _asyncio or _asyncio_parts()
    if not asyncio.iscoroutine(coro):
        coro = _await(coro)
    if getattr(_caller, "loop_ok", False):
        caller_loop = asyncio.events._get_running_loop()
        if caller_loop is not None and caller_loop is not _loop:
            return _run_on_caller_loop(asyncio, caller_loop, coro)
    loop = _loop or event_loop()
    if not _step_lock.acquire(blocking=False):
        # The loop thread is running callbacks right now: queue the coroutine
        # for it (started at its next wake-up, together with any others).
        deferred = _Deferred(coro)
        _deferred.append(deferred)
        return False, deferred
    events = asyncio.events
    previous = events._get_running_loop()
    events._set_running_loop(loop)
    try:
        task = _start_task(loop, coro)
    finally:
        events._set_running_loop(previous)
        _step_lock.release()
    if task.done():
        return True, task.result()
    return False, task


_wake_pending = False
_deferred: "list[_Deferred]" = []


class _Deferred:
    """A coroutine queued for the loop thread to start (see :func:`run_eager`)."""

    __slots__ = ("coro", "on_done", "task", "cancelled")

    def __init__(self, coro):
        self.coro = coro
        self.on_done = None
        self.task = None
        self.cancelled = False

    def start(self, loop) -> None:
        if self.cancelled:
            self.coro.close()
            return
        self.task = loop.create_task(self.coro)
        self.task.add_done_callback(self.on_done)

    def cancel(self) -> None:  # called on the loop thread
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


def _woken() -> None:
    global _wake_pending
    _wake_pending = False
    while _deferred:
        _deferred.pop(0).start(_loop)


def watch(task, on_done: Callable[[Any], None]) -> None:
    """Call ``on_done(task)`` on the loop thread when ``task`` ends."""
    global _wake_pending
    if type(task) is _Deferred:
        task.on_done = on_done
    else:
        task.add_done_callback(on_done)
        if _loop is None or task.get_loop() is not _loop:
            return  # the caller's loop: it runs on this very thread, nothing to wake
    # Wake the loop: the eager step may have added timers or ready callbacks
    # it has not seen, a task that ended meanwhile queued on_done, or a
    # deferred start waits.  One pending wake-up is enough for any number of
    # starts: the loop recomputes its timeout after running _woken, and a
    # start after that wakes it again.  (Waking it per start made a thousand
    # concurrent starts fight the loop thread for the GIL a thousand times.)
    if not _wake_pending:
        _wake_pending = True
        (_loop or event_loop()).call_soon_threadsafe(_woken)


def cancel(task) -> None:
    """Cancel a task (or deferred start) from :func:`run_eager`, from any thread."""
    loop = task.get_loop() if hasattr(task, "get_loop") else (_loop or event_loop())
    if not loop.is_closed():
        loop.call_soon_threadsafe(task.cancel)
