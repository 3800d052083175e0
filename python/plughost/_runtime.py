"""Python half of plughost's embedding: plugin import, logging, asyncio bridge.

Loaded by the Rust runtime as the module ``_plughost_runtime`` (from source
embedded in the binary, so the standalone binary and the wheel share it).
Only the Rust side calls into this module; plugins never see it.
"""

from __future__ import annotations

import gc
import sys
import threading
from types import FrameType, ModuleType
# `typing` costs milliseconds at start-up (its import is most of what this
# module added to a start); annotations are strings here, and type checkers
# treat a module-level `TYPE_CHECKING = False` as the real one.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any, Callable

import _plughost_native as _native

# What importlib.util re-exports (spec_from_loader, module_from_spec,
# spec_from_file_location), from the import system's own modules, which
# every CPython has loaded: importing importlib.util runs contextlib and its
# imports, milliseconds at every start.
import _frozen_importlib as _bootstrap  # noqa: E402
import _frozen_importlib_external as _bootstrap_external  # noqa: E402

#: The home of the host built last: what plugin code outside any plugin
#: package (direct registrations of the Python API) sees.
HOME: str = ""

PLUGIN_PACKAGE = "_plughost_plugins"


# ── Plugin import ────────────────────────────────────────────────


# ── Plugin bytecode ──────────────────────────────────────────────
#
# What runs is what the install lock covers: a plugin's sources. CPython's
# own loaders would run a ``__pycache__/*.pyc`` beside them whose header
# matches the source's size and time (anyone who can write the plugin's
# directory can forge one, and the lock leaves ``*.pyc`` out), and a bare
# ``x.pyc`` where no ``x.py`` is. Plugin code is therefore loaded by
# :class:`PluginLoader`, which reads only the source and keeps its bytecode
# in plughost's own cache, under a name that is the hash of the source,
# its path and the interpreter's magic number; and the plugin directories'
# finder knows no sourceless files.

import os  # noqa: E402
import marshal  # noqa: E402

try:
    from _blake2 import blake2b as _hash  # built in: no OpenSSL to load
except ImportError:  # pragma: no cover - a CPython built without it
    from hashlib import blake2b as _hash

_MAGIC: bytes = _bootstrap_external.MAGIC_NUMBER

#: Plugin directories imported from: their finders are :func:`_plugin_finder`'s.
_PLUGIN_DIRS: "set[str]" = set()


def _plugin_bytecode_dir() -> "str | None":
    cache = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.environ["HOME"], ".cache") if os.environ.get("HOME") else None
    )
    return os.path.join(cache, "plughost", "plugin-bytecode") if cache else None


class PluginLoader(_bootstrap_external.SourceFileLoader):
    """A plugin's module from its source, never from a ``.pyc`` beside it;
    the compiled code is cached in ``<cache>/plughost/plugin-bytecode/``
    keyed by the content hash (nothing written under ``-B``)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        source = self.get_data(path)
        key = _hash(
            _MAGIC + os.fsencode(path) + b"\0" + source, digest_size=20
        ).hexdigest()
        directory = _plugin_bytecode_dir()
        file = os.path.join(directory, key + ".pyc") if directory else None
        if file is not None:
            try:
                with open(file, "rb") as f:
                    data = f.read()
                if data[: len(_MAGIC)] == _MAGIC:
                    return marshal.loads(data[len(_MAGIC) :])
            except Exception:
                pass  # missing or unreadable: compiled below
        code = self.source_to_code(source, path)
        if file is not None and not sys.dont_write_bytecode:
            tmp = f"{file}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                os.makedirs(directory, exist_ok=True)
                with open(tmp, "wb") as f:
                    f.write(_MAGIC + marshal.dumps(code))
                os.replace(tmp, file)
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        return code


def _plugin_finder(path: str):
    """``sys.path_hooks`` entry: a finder of sources and extension modules
    only (no sourceless ``.pyc``) for a plugin's directories."""
    if path in _PLUGIN_DIRS or any(path.startswith(d + os.sep) for d in _PLUGIN_DIRS):
        return _bootstrap_external.FileFinder(
            path,
            (PluginLoader, _bootstrap_external.SOURCE_SUFFIXES),
            (_bootstrap_external.ExtensionFileLoader, _bootstrap_external.EXTENSION_SUFFIXES),
        )
    raise ImportError("not a plugin directory")


if _plugin_finder not in sys.path_hooks:
    sys.path_hooks.insert(0, _plugin_finder)


def _plugin_root() -> ModuleType:
    root = sys.modules.get(PLUGIN_PACKAGE)
    if root is None:
        root = ModuleType(PLUGIN_PACKAGE)
        root.__path__ = []  # a package with no files: children are added by spec
        root.__spec__ = _bootstrap.spec_from_loader(PLUGIN_PACKAGE, None, is_package=True)
        root.__spec__._initializing = False  # type: ignore[attr-defined]  # see import_plugin
        sys.modules[PLUGIN_PACKAGE] = root
    return root


def import_plugin(slug: str, directory: str, init_file: str, home: str) -> ModuleType:
    """Import a plugin directory as the package ``_plughost_plugins.<slug>``.

    Each plugin gets its own package, so sibling modules and relative imports
    work and two plugins with a ``util.py`` each never collide.  On failure
    every module the plugin had imported from its package is removed again.
    """
    _plugin_root()
    name = f"{PLUGIN_PACKAGE}.{slug}"
    directory = os.path.abspath(directory)
    if directory not in _PLUGIN_DIRS:
        _PLUGIN_DIRS.add(directory)
        # A finder made before it was a plugin's would read bytecode.
        for cached in [p for p in sys.path_importer_cache if p == directory or p.startswith(directory + os.sep)]:
            sys.path_importer_cache.pop(cached, None)
    spec = _bootstrap_external.spec_from_file_location(
        name,
        init_file,
        loader=PluginLoader(name, init_file),
        submodule_search_locations=[directory],
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import plugin from {init_file}")
    module = _bootstrap.module_from_spec(spec)
    sys.modules[name] = module
    PACKAGE_HOMES[slug] = home
    try:
        spec.loader.exec_module(module)
    except BaseException:
        forget_plugin(slug)
        raise
    # As the import system leaves what it loads: without it, every
    # ``from . import x`` in the plugin (a lazy import inside a hook) makes
    # CPython raise and clear an AttributeError looking for it (~1 µs).
    spec._initializing = False  # type: ignore[attr-defined]
    return module


def _current_frames() -> "dict[int, FrameType]":
    """``sys._current_frames()`` with the cyclic collector held off.

    CPython 3.11 builds the frame objects under its runtime's thread-list
    lock; a collection they trigger that frees a ``threading.local`` takes
    that lock again (``local_clear``), and the thread waits for itself for
    ever: a Hermes plugin whose ``register()`` raised hung ``plugins
    install`` here.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def _running_in(name: str) -> bool:
    """Whether another thread is running code of package ``name`` now."""
    me = threading.get_ident()
    for ident, frame in _current_frames().items():
        if ident == me:
            continue
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module == name or module.startswith(name + "."):
                return True
            frame = frame.f_back
    return False


_plugin_modules: "dict[str, list[str]]" = {}
_plugin_modules_mark: "tuple[int, object]" = (-1, None)


def _modules_mark() -> "tuple[int, object]":
    """``sys.modules``' size and newest key: what an import or removal changes."""
    return (len(sys.modules), next(reversed(sys.modules), None))


def _modules_of(slug: str) -> "list[str]":
    """The ``sys.modules`` keys of plugin package ``slug`` (it and its submodules).

    A host dropping 100 plugins used to scan ``sys.modules`` once per
    plugin; the keys of every plugin package are now gathered in one scan,
    done again whenever a module was imported or removed since.
    """
    global _plugin_modules
    if _modules_mark() != _plugin_modules_mark:
        prefix = PLUGIN_PACKAGE + "."
        found: "dict[str, list[str]]" = {}
        for key in list(sys.modules):
            if key.startswith(prefix):
                found.setdefault(key[len(prefix) :].partition(".")[0], []).append(key)
        _plugin_modules = found
    return _plugin_modules.pop(slug, [])


def forget_plugin(slug: str) -> None:
    """Drop a plugin's package and submodules from ``sys.modules``.

    Not while another thread runs the plugin's code (a background thread
    still importing its submodules at exit): the package is left in place
    for it, and a later load of the plugin gets a name of its own.
    """
    global _plugin_modules_mark
    name = f"{PLUGIN_PACKAGE}.{slug}"
    if _running_in(name):
        return
    PACKAGE_HOMES.pop(slug, None)
    for key in _modules_of(slug):
        sys.modules.pop(key, None)
    _plugin_modules_mark = _modules_mark()


def describe_exception(exc: BaseException) -> str:
    """``<ExceptionType>: <message>`` (just the type when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def exception_report(exc: BaseException, tb: "TracebackType | None" = None) -> "tuple[str, str, str, str]":
    """``(type name, str(exc), formatted traceback, "file:line")`` of a plugin failure.

    The location is the plugin's own innermost frame: the innermost one
    outside the standard library, installed packages, plughost's own modules
    and the import machinery; failing that, outside the standard library and
    plughost (a plugin installed as a distribution); failing that, the
    innermost frame at all (for a ``SyntaxError``, the offending line), so a
    user sees where to look in their code, not in ``json/decoder.py``.
    """
    import traceback

    if tb is None:
        tb = exc.__traceback__
    elif exc.__traceback__ is None:
        exc.__traceback__ = tb
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    frames = []
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<frozen "):
            frames.append(f"{filename}:{tb.tb_lineno}")
        tb = tb.tb_next
    location = _plugin_frame(frames)
    if isinstance(exc, SyntaxError) and exc.filename:
        location = f"{exc.filename}:{exc.lineno}"
    return type(exc).__name__, str(exc), text, location


def _plugin_frame(frames: "list[str]") -> str:
    """The innermost of ``frames`` ("file:line", outermost first) that is the
    plugin's own, by the rules of :func:`exception_report`."""
    import os

    sep = os.sep
    stdlib = os.path.dirname(os.__file__) + sep
    own = __file__ if not __file__.startswith("<") else ""
    own = os.path.dirname(own) + sep if own else ""

    def host(f: str) -> bool:
        return f.startswith("<plughost:") or bool(own) and f.startswith(own)

    def library(f: str) -> bool:
        return f.startswith(stdlib) and sep + "site-packages" + sep not in f[len(stdlib):]

    def installed(f: str) -> bool:
        return sep + "site-packages" + sep in f or sep + "dist-packages" + sep in f

    for keep in (
        lambda f: not host(f) and not library(f) and not installed(f),
        lambda f: not host(f) and not library(f),
        lambda f: True,
    ):
        for f in reversed(frames):
            if keep(f):
                return f
    return ""


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
    """Send every ``logging`` record to the Rust ``tracing`` subscriber.

    ``logging`` costs about 10 ms to import, and a host whose plugins never
    log never needs it: until something imports it, a finder waits for that
    import and sets the forwarding up right after it (no record can exist
    before ``logging`` does)."""
    if "logging" in sys.modules:
        _forward_logging(level)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _ForwardOnImport):
            finder.level = level  # the latest call's level, as when it runs at once
            return
    sys.meta_path.insert(0, _ForwardOnImport(level))


class _ForwardOnImport:
    """A ``sys.meta_path`` finder for ``logging`` alone: the real spec (from
    the finders after it), its loader wrapped to set up the forwarding once
    the module has run. It leaves ``sys.meta_path`` on its first use."""

    def __init__(self, level: int) -> None:
        self.level = level

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "logging":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util  # when logging is first imported, not at start-up

        spec = importlib.util.find_spec("logging")
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenForward(spec.loader, self.level)
        return spec


class _ThenForward:
    """The loader of ``logging``, then :func:`_forward_logging`."""

    def __init__(self, loader, level: int) -> None:
        self.loader = loader
        self.level = level

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _forward_logging(self.level)


def _forward_logging(level: int) -> None:
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


# ── Homes ────────────────────────────────────────────────────────

#: The home of every loaded plugin package (``_plughost_plugins.<slug>``):
#: each host has its own home, and a plugin sees its own host's.
PACKAGE_HOMES: "dict[str, str]" = {}


def caller_home() -> "str | None":
    """The home of the host whose plugin is calling (found on the call stack).

    Walks outward from the caller to the nearest frame of a plugin package,
    so helpers, libraries and threads a plugin starts see its host's home.
    ``None`` outside plugin code.
    """
    frame = sys._getframe(1)
    prefix = PLUGIN_PACKAGE + "."
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if type(name) is str and name.startswith(prefix):
            home = PACKAGE_HOMES.get(name[len(prefix) :].partition(".")[0])
            if home is not None:
                return home
        frame = frame.f_back
    return None


# ── asyncio bridge ───────────────────────────────────────────────
#
# Two ways to run a plugin coroutine from Rust:
#
# * inline (Rust, ``runtime::bridge``): inside an awaited plughost call, the
#   coroutine is driven by the caller's own task, as ``await`` would;
# * on the runtime's loop (here): blocking calls and the agent loop start the
#   coroutine as a task on one asyncio loop on a daemon thread, taking its
#   first step on the calling thread (a Python 3.12 eager task), so one that
#   never suspends costs no thread hop.

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
    loop = _loop
    if loop is not None:
        return loop
    with _loop_lock:
        if _loop is None:
            asyncio = _asyncio_parts()
            loop = asyncio.new_event_loop()
            loop._selector = _UnlockWhileSelecting(loop._selector)
            ready = threading.Event()
            threading.Thread(target=_serve, args=(loop, ready), name="plughost-asyncio", daemon=True).start()
            ready.wait()
            _loop = loop
    return _loop


def _serve(loop, ready) -> None:
    """The loop thread: run the loop for good.

    A plugin's ``SystemExit``/``KeyboardInterrupt`` escaping a task step
    (asyncio re-raises those out of ``run_forever``; the task already holds
    the exception, so its caller gets it as the call's error) and a plugin
    calling ``loop.stop()`` both leave the loop serving.  Should the thread
    end anyway, the calls waiting on it fail at once, and the next call
    starts a fresh loop.
    """
    global _loop, _wake_pending
    asyncio = _asyncio_parts()
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        with _step_lock:
            while True:
                try:
                    loop.run_forever()
                except BaseException as exc:  # noqa: BLE001 - the loop must outlive any plugin
                    _log_escaped(exc)
    finally:
        with _loop_lock:
            if _loop is loop:
                _loop = None
        _wake_pending = False  # the next loop must be woken afresh
        _native.loop_ended()


def _log_escaped(exc: BaseException) -> None:
    import logging

    logging.getLogger("plughost").warning(
        "a plugin coroutine raised %s; the call fails and the runtime loop keeps serving", describe_exception(exc)
    )


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
                try:
                    handle._run()
                except (SystemExit, KeyboardInterrupt):
                    pass  # the task holds it (asyncio sets it, then re-raises)
        return task


def start(coro, on_done):
    """Start ``coro`` on the runtime loop with ``on_done`` already attached.

    Returns ``(True, result)`` when the coroutine finished in its first step
    (taken here, on the calling thread; raises its exception if it failed);
    otherwise ``(False, handle)``: ``on_done(future)`` is called on the loop
    thread when it ends, and ``handle`` can be passed to :func:`cancel`.
    The completion is attached before the loop can see the task, so no
    completion is ever lost.  If the loop thread is busy running callbacks
    right now, the coroutine is queued for it instead.
    """
    asyncio = _asyncio or _asyncio_parts()
    loop = _loop or event_loop()
    if asyncio.events._get_running_loop() is loop:
        # Inside a step of plughost's own loop (a blocking plughost call made
        # from a plugin coroutine): waiting for the loop here would deadlock it.
        if asyncio.iscoroutine(coro):
            coro.close()
        raise RuntimeError(
            "a blocking plughost call was made from inside plughost's own event loop "
            "(from a plugin coroutine); it would wait on the loop it blocks. "
            "Await host.acall_tool(...) instead."
        )
    if not asyncio.iscoroutine(coro):
        coro = _await(coro)
    if not _step_lock.acquire(blocking=False):
        deferred = _Deferred(coro, on_done)
        _deferred.append(deferred)
        _wake(loop)
        return False, deferred
    events = asyncio.events
    previous = events._get_running_loop()
    events._set_running_loop(loop)
    try:
        task = _start_task(loop, coro)
        done = task.done()
        if not done:
            task.add_done_callback(on_done)
    finally:
        events._set_running_loop(previous)
        _step_lock.release()
    # The step may have added timers or ready callbacks (a task it created,
    # a call_later) that the loop, waiting in select, has not seen.
    if loop._ready or loop._scheduled:
        _wake(loop)
    if done:
        return True, task.result()
    return False, task


async def _await(awaitable):
    return await awaitable


_wake_pending = False
_deferred: "list[_Deferred]" = []
#: How many coroutines the loop thread started from the queue (for tests).
DEFERRED_STARTS = 0


class _Deferred:
    """A coroutine queued for the loop thread to start (see :func:`start`)."""

    __slots__ = ("coro", "on_done", "task", "cancelled")

    def __init__(self, coro, on_done):
        self.coro = coro
        self.on_done = on_done
        self.task = None
        self.cancelled = False

    def start(self, loop) -> None:
        global DEFERRED_STARTS
        DEFERRED_STARTS += 1
        if self.cancelled:
            self.coro.close()
            future = loop.create_future()
            future.cancel()
            self.on_done(future)
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
    loop = _loop
    while _deferred:
        _deferred.pop(0).start(loop)


def _wake(loop) -> None:
    # One pending wake-up is enough for any number of starts: the loop
    # recomputes its timeout after running _woken, and a start after that
    # wakes it again.  (Waking it per start made a thousand concurrent starts
    # fight the loop thread for the GIL a thousand times.)
    global _wake_pending
    if not _wake_pending:
        _wake_pending = True
        loop.call_soon_threadsafe(_woken)


def cancel(task) -> None:
    """Cancel a task (or deferred start) from :func:`start`, from any thread."""
    loop = _loop if type(task) is _Deferred else task.get_loop()
    if loop is not None and not loop.is_closed():
        loop.call_soon_threadsafe(task.cancel)


# ── Awaiting plughost calls from the caller's loop ───────────────


def _release(future) -> None:
    if not future.done():
        future.set_result(None)


def wake(future) -> None:
    """Wake the task waiting on ``future`` (a plughost call that suspended):
    directly on the future's own loop thread, thread-safely elsewhere."""
    loop = future.get_loop()
    asyncio = _asyncio or _asyncio_parts()
    if asyncio.events._get_running_loop() is loop:
        _release(future)
    elif not loop.is_closed():
        try:
            loop.call_soon_threadsafe(_release, future)
        except RuntimeError:
            pass  # closed meanwhile: nobody is waiting any more


def wait_future():
    """A future of the running loop for a suspended plughost call to yield."""
    asyncio = _asyncio or _asyncio_parts()
    loop = asyncio.events._get_running_loop()
    if loop is None:
        raise RuntimeError("a plughost awaitable must be awaited inside a running asyncio event loop")
    future = loop.create_future()
    future._asyncio_future_blocking = True
    return future


def _at_exit() -> None:
    _native.interpreter_exiting()


import atexit  # noqa: E402

atexit.register(_at_exit)
