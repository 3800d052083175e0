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
    forget_plugin(slug)  # a host built earlier in this process may have loaded another copy
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


def event_loop():
    """The runtime's asyncio loop, started on a daemon thread on first use."""
    global _loop
    if _loop is not None:
        return _loop
    with _loop_lock:
        if _loop is None:
            import asyncio

            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="plughost-asyncio", daemon=True).start()
            ready.wait()
            _loop = loop
    return _loop


def _noop() -> None:
    pass


if sys.version_info >= (3, 12):

    def _new_eager_task(loop, coro):
        import asyncio

        return asyncio.Task(coro, loop=loop, eager_start=True)

else:

    def _new_eager_task(loop, coro):
        # Python 3.11 has no eager tasks: build the pure-Python Task, take its
        # first step off the ready queue and run that step here and now.
        from asyncio import tasks

        task = tasks._PyTask(coro, loop=loop)
        ready = loop._ready
        step = task._Task__step
        if ready and getattr(ready[-1], "_callback", None) == step:
            ready.pop()
        else:  # not where we expected it: let the loop run it instead
            return task
        step()
        return task


async def _await(awaitable):
    return await awaitable


def run_eager(coro, on_done: Callable[[Any], None]):
    """Start ``coro`` as a task on the runtime loop, stepping it here first.

    Returns ``(True, result)`` when the coroutine finished without suspending
    (no thread hop at all) and raises its exception if it failed.  Otherwise
    returns ``(False, task)`` after arranging ``on_done(task)`` to be called on
    the loop thread when the task ends.  The first step runs on the calling
    thread under the GIL with the loop marked as running, exactly like a
    Python 3.12 eager task; if the loop is busy inside another task at this
    moment, the coroutine is handed to the loop instead.
    """
    import asyncio
    from asyncio import events, tasks

    if not asyncio.iscoroutine(coro):
        coro = _await(coro)
    loop = event_loop()
    if tasks._current_tasks.get(loop) is not None:
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        future.add_done_callback(on_done)
        return False, future
    previous = events._get_running_loop()
    events._set_running_loop(loop)
    try:
        task = _new_eager_task(loop, coro)
    finally:
        events._set_running_loop(previous)
    if task.done():
        return True, task.result()
    task.add_done_callback(on_done)
    loop.call_soon_threadsafe(_noop)  # wake the loop: the step may have added timers
    return False, task


def cancel(task) -> None:
    """Cancel a task (or concurrent future) started by :func:`run_eager`, from any thread."""
    loop = event_loop()
    if hasattr(task, "get_loop"):
        loop.call_soon_threadsafe(task.cancel)
    else:
        task.cancel()
