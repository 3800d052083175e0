"""The parts of Hermes's current ``PluginContext`` kept in Python
(``_plughost_hermes_ctx``): teardown (``on_unload``, ``spawn_task``),
events (``emit``/``subscribe``), ``state``, ``profile_name``, and the
facades plughost has no host for (``platform_actions``,
``subagent_lifecycle``). One :class:`HostBus` per host, one
:class:`PluginRuntime` per loaded plugin; the Rust context hands them out.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
import json
import logging
import os
import queue
import threading
from pathlib import Path

logger = logging.getLogger("hermes_cli.plugins")

#: Hermes reserves this namespace for core events.
HERMES_EVENT_NAMESPACE = "hermes"
#: Events queued and not yet delivered, per host, past which emit drops
#: (Hermes's ``_EVENT_PENDING_CAP``).
MAX_PENDING_EVENTS = 64
#: How deep an emit from inside a subscriber may nest before it is dropped.
MAX_EVENT_DEPTH = 8


class HostBus:
    """``<plugin_key>:<event>`` delivery for one host: a single worker
    thread, so order is preserved and a blocking subscriber cannot stall
    the emitter. Each subscriber is called as Hermes's
    ``plugin_runtime/dispatch.py`` ``_deliver_event`` calls it:
    ``callback(**deepcopy(payload))``, in a copy of the emitter's
    ``contextvars`` context, an awaitable it returns awaited."""

    def __init__(self, act=None) -> None:
        #: ``act(verb, platform, args_json) -> result_json``: the host's gateway.
        self._act = act
        self._subscribers: "dict[str, list[tuple[str, object]]]" = {}
        self._lock = threading.Lock()
        self._queue: "queue.Queue" = queue.Queue()
        self._worker = None
        self._local = threading.local()
        #: key -> manifest name of each plugin loaded on the host.
        self._loaded: "dict[str, str]" = {}
        #: name -> (owner, provider): the host's terminal backends.
        self._terminal: "dict[str, tuple[str, object]]" = {}

    def subscribe(self, owner: str, event: str, callback) -> None:
        with self._lock:
            self._subscribers.setdefault(event, []).append((owner, callback))

    def platform_action(self, verb: str, platform: str, args: dict) -> dict:
        """A ``platform_actions`` verb on the host's gateway (blocking)."""
        if self._act is None:
            return {"ok": False, "error": "gateway_unavailable",
                    "detail": "no gateway runner is active in this process"}
        return json.loads(self._act(verb, platform, json.dumps(args)))

    def remove_owner(self, owner: str) -> None:
        with self._lock:
            for event, subs in list(self._subscribers.items()):
                subs[:] = [s for s in subs if s[0] != owner]
                if not subs:
                    del self._subscribers[event]

    def dispatch(self, event: str, payload: dict) -> int:
        with self._lock:
            subs = list(self._subscribers.get(event, ()))
        if not subs:
            return 0
        depth = getattr(self._local, "depth", 0)
        if depth >= MAX_EVENT_DEPTH:
            logger.warning("Event bus recursion cap (%d) exceeded while dispatching '%s' "
                           "— dropping this emit to prevent an infinite loop", MAX_EVENT_DEPTH, event)
            return 0
        if self._queue.unfinished_tasks >= MAX_PENDING_EVENTS:
            logger.warning("Event bus pending budget (%d) exhausted while dispatching '%s' — dropping this emit",
                           MAX_PENDING_EVENTS, event)
            return 0
        self._start()
        self._queue.put((event, dict(payload), subs, depth + 1, contextvars.copy_context()))
        return len(subs)

    def _start(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._deliver, name="hermes-plugin-events", daemon=True)
                self._worker.start()

    def _deliver(self) -> None:
        while True:
            event, payload, subs, depth, context = self._queue.get()
            self._local.depth = depth
            for owner, callback in subs:
                with self._lock:
                    # Unloaded since the event was queued: not delivered.
                    if not any(s[1] is callback for s in self._subscribers.get(event, ())):
                        continue
                try:
                    # A fresh deep copy per subscriber: none can change what the next sees.
                    result = context.copy().run(callback, **copy.deepcopy(payload))
                    if inspect.isawaitable(result):
                        asyncio.run(_awaited(result))
                except (Exception, SystemExit) as exc:  # a subscriber never breaks delivery
                    logger.warning("Event '%s' callback %s (plugin %s) raised: %s (event provides: %s)",
                                   event, getattr(callback, "__name__", repr(callback)), owner, exc,
                                   ", ".join(sorted(payload)) or "no fields")
            self._local.depth = 0
            self._queue.task_done()

    def drain(self, limit: float = 2.0) -> None:
        """Wait (a bounded time) until the events queued so far are
        delivered: a plugin being unloaded still gets what was emitted to
        it. Not from the delivery thread itself."""
        if threading.current_thread() is self._worker:
            return
        import time

        deadline = time.monotonic() + limit
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks and time.monotonic() < deadline:
                self._queue.all_tasks_done.wait(max(0.0, deadline - time.monotonic()))

    # -- which plugins are loaded (for has_plugin) -------------------------
    def loaded(self, key: str, name: str) -> None:
        with self._lock:
            self._loaded[key] = name

    def unloaded(self, key: str) -> None:
        with self._lock:
            self._loaded.pop(key, None)

    def has_plugin(self, plugin_id: str) -> bool:
        with self._lock:
            return any(k == plugin_id or n == plugin_id for k, n in self._loaded.items())

    # -- terminal backends (``agent.terminal_env_registry``) -----------------
    def add_terminal_provider(self, owner: str, provider) -> str:
        """Register a backend by its name; ``ValueError`` as Hermes's registry raises it."""
        from agent.terminal_env_registry import BUILTIN_BACKEND_NAMES

        name = str(provider.name).strip().lower()
        if not name:
            raise ValueError("Terminal environment provider name must be non-empty")
        if name in BUILTIN_BACKEND_NAMES:
            raise ValueError(f"Terminal backend name '{name}' is reserved for the built-in {name} backend "
                             "and cannot be registered by a plugin")
        with self._lock:
            # A plugin's new version (a reload) replaces its old one's backend.
            if name in self._terminal and self._terminal[name][0] != owner:
                raise ValueError(f"Terminal environment provider '{name}' is already registered")
            self._terminal[name] = (owner, provider)
        return name

    def drop_terminal_providers(self, providers) -> None:
        """Forget these provider objects (a plugin version being unloaded)."""
        with self._lock:
            self._terminal = {n: e for n, e in self._terminal.items()
                              if not any(e[1] is p for p in providers)}

    def terminal_providers(self) -> dict:
        with self._lock:
            return {n: p for n, (_o, p) in self._terminal.items()}


class RemoteBus(HostBus):
    """The bus of a plugin loaded in a worker process (issue 47): the host's
    bus is the one that counts. ``emit`` and ``has_plugin`` are answered by
    the host; a subscriber is kept here and the host is told once per event,
    then calls :meth:`deliver` for each event emitted on it (by any plugin),
    in order. ``call`` sends one typed host call and returns its answer."""

    def __init__(self, call) -> None:
        super().__init__()
        self._call = call
        #: (owner, callback) of each subscription, by the index the host knows it by.
        self._by_index: "list[tuple[str, object]]" = []

    def subscribe(self, owner: str, event: str, callback) -> None:
        super().subscribe(owner, event, callback)
        with self._lock:
            index = len(self._by_index)
            self._by_index.append((owner, callback))
        self._call({"Subscribe": {"event": event, "index": index}})

    def dispatch(self, event: str, payload: dict) -> int:
        return int(self._call({"Emit": {"event": event, "payload": dict(payload)}}))

    def platform_action(self, verb: str, platform: str, args: dict) -> dict:
        return self._call({"PlatformAction": {"verb": verb, "platform": platform, "args": dict(args)}})

    def deliver(self, event: str, index: int, payload: dict) -> None:
        """Run this worker's subscriber number ``index`` now, as the host's
        bus thread runs an in-process plugin's."""
        with self._lock:
            subs = [self._by_index[index]] if 0 <= index < len(self._by_index) else []
            # Unsubscribed since (the plugin unloaded): not delivered.
            subs = [s for s in subs if any(s[1] is c for _o, c in self._subscribers.get(event, ()))]
        for owner, callback in subs:
            try:
                result = callback(**copy.deepcopy(payload))
                if inspect.isawaitable(result):
                    asyncio.run(_awaited(result))
            except (Exception, SystemExit) as exc:  # a subscriber never breaks delivery
                logger.warning("Event '%s' callback %s (plugin %s) raised: %s (event provides: %s)",
                               event, getattr(callback, "__name__", repr(callback)), owner, exc,
                               ", ".join(sorted(payload)) or "no fields")

    def loaded(self, key: str, name: str) -> None:
        super().loaded(key, name)
        self._call({"Loaded": {"name": name}})

    def has_plugin(self, plugin_id: str) -> bool:
        return bool(self._call({"HasPlugin": {"id": plugin_id}}))


def _cancel_and_wait(future, holder: dict, loop, limit: float = 2.0) -> None:
    """Cancel a task on plughost's loop and wait (a bounded time) until its
    own cancellation handling has run, so a teardown is over when unload
    returns; from the loop's own thread, only cancel."""
    if future.done():
        return
    future.cancel()
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    if on_loop:
        return
    finished = threading.Event()

    def watch():
        task = holder.get("task")
        if task is None or task.done():
            finished.set()
        else:
            task.add_done_callback(lambda _t: finished.set())

    loop.call_soon_threadsafe(watch)
    finished.wait(limit)


def _cancel_on_loop(task, loop, limit: float = 2.0) -> None:
    """Cancel a task of an asyncio loop, from any thread: on the loop's own
    thread directly; from another one through the loop (``Task.cancel`` is
    not thread-safe, and an idle loop would never see it), waiting (a
    bounded time) for its cancellation handling, as unload does for tasks on
    plughost's loop."""
    if task.done():
        return
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    if on_loop or loop.is_closed() or not loop.is_running():
        task.cancel()
        return
    finished = threading.Event()

    def cancel():
        if task.done():
            finished.set()
        else:
            task.add_done_callback(lambda _t: finished.set())
            task.cancel()

    loop.call_soon_threadsafe(cancel)
    finished.wait(limit)


async def _awaited(awaitable):
    return await awaitable


class PluginState:
    """A plugin's durable JSON state in the Hermes home
    (``plugin_state/<plugin_id>.json``): ``get``/``set``/``delete``/
    ``keys``/``all`` and mapping access; every write replaces the file
    whole."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def _load(self) -> dict:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, data: dict) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self._path.with_suffix(f".tmp.{os.getpid()}")
        scratch.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(scratch, self._path)

    def get(self, key: str, default=None):
        return self._load().get(key, default)

    def set(self, key: str, value) -> None:
        json.dumps(value)  # refuse what would not persist, before writing
        with self._lock:
            data = self._load()
            data[key] = value
            self._save(data)

    def delete(self, key: str) -> bool:
        with self._lock:
            data = self._load()
            found = data.pop(key, _MISSING) is not _MISSING
            if found:
                self._save(data)
            return found

    def keys(self) -> list:
        return list(self._load())

    def all(self) -> dict:
        return self._load()

    def __getitem__(self, key):
        data = self._load()
        if key not in data:
            raise KeyError(key)
        return data[key]

    def __setitem__(self, key, value) -> None:
        self.set(key, value)

    def __delitem__(self, key) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key) -> bool:
        return key in self._load()

    def __repr__(self) -> str:
        return f"<PluginState {self._path}>"


_MISSING = object()


def _segments(key, plugin_id: str) -> tuple:
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"Plugin '{plugin_id}' config key must be a non-empty string")
    parts = tuple(key.split("."))
    if any(not p.strip() for p in parts):
        logger.warning("Rejected config path %r from plugin %s", key, plugin_id)
        raise ValueError(f"config key {key!r} has an empty segment")
    return parts


def _dig(node, path, default=None):
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _plughost_config(home: Path) -> dict:
    try:
        data = json.loads((home / "config.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _hermes_config(home: Path) -> dict:
    import _plughost_hermes

    path = home / "config.yaml"
    try:
        data = _plughost_hermes.parse_yaml(path.read_text(encoding="utf-8-sig"), str(path))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class PluginRuntime:
    """One loaded plugin's teardown and event ends."""

    def __init__(self, plugin_id: str, bus: HostBus, hermes_home: str, plughost_home: str) -> None:
        self.plugin_id = plugin_id
        self._plughost_home = Path(plughost_home)
        self._bus = bus
        self._home = Path(hermes_home)
        #: (kind, label, release) in acquisition order; released in reverse.
        self._teardown: "list[tuple[str, str, object]]" = []
        self._lock = threading.Lock()
        self._state = None
        from hermes_cli.platform_actions import PlatformActions

        self.platform_actions = PlatformActions(plugin_id, self._entry, bus.platform_action)
        self._subagents = None
        #: ``register_platform`` entries, for the gateway (``platform.rs``).
        self._platforms: list = []
        #: prefix -> provider: this plugin's ``@<prefix>:`` references.
        self._references: "dict[str, object]" = {}
        #: name -> provider: this plugin's terminal backends.
        self._backends: "dict[str, object]" = {}
        #: session -> environment of the active backend, made on first use.
        self._environments: "dict[str, object]" = {}

    # -- teardown ---------------------------------------------------------
    def on_unload(self, callback):
        if not callable(callback):
            raise TypeError("on_unload callback must be callable")
        with self._lock:
            self._teardown.append(("on_unload", getattr(callback, "__name__", "callback"), callback))

    def spawn_task(self, coro, *, name=None):
        """A supervised task: on the running loop when there is one (as in
        Hermes), else on plughost's own loop; unload cancels it."""
        if not asyncio.iscoroutine(coro):
            raise TypeError("spawn_task expects a coroutine")
        task_name = name or f"plugin:{self.plugin_id}:task"
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            task = loop.create_task(coro, name=task_name)
            running = loop
            release = lambda: _cancel_on_loop(task, running)  # noqa: E731
        else:
            import _plughost_runtime

            loop = _plughost_runtime.event_loop()
            holder: dict = {}

            async def supervised():
                holder["task"] = asyncio.current_task()
                return await coro

            task = asyncio.run_coroutine_threadsafe(supervised(), loop)
            release = lambda: _cancel_and_wait(task, holder, loop)  # noqa: E731
        entry = ("background_task", task_name, release)
        with self._lock:
            self._teardown.append(entry)

        def _done(_t):
            with self._lock:
                if entry in self._teardown:
                    self._teardown.remove(entry)

        task.add_done_callback(_done)
        return task

    def unload(self) -> None:
        """Release everything in reverse acquisition order; failures are logged."""
        self._bus.drain()
        self._bus.remove_owner(self.plugin_id)
        self._bus.drop_terminal_providers(list(self._backends.values()))
        if self._subagents is not None:
            self._subagents.shutdown()
        environments, self._environments = list(self._environments.values()), {}
        for env in environments:
            try:
                getattr(env, "cleanup", lambda: None)()
            except Exception as exc:
                logger.warning("plugin %s terminal environment cleanup raised: %s", self.plugin_id, exc)
        with self._lock:
            items, self._teardown = self._teardown[::-1], []
        for kind, label, release in items:
            try:
                release()
            except Exception as exc:
                logger.warning("plugin %s %s %s raised during unload: %s", self.plugin_id, kind, label, exc)

    # -- events -----------------------------------------------------------
    def emit(self, event, payload=None) -> int:
        key = self.plugin_id
        if not event or not isinstance(event, str):
            raise ValueError(f"Plugin '{key}' emit() requires a non-empty event name")
        if ":" in event:
            raise ValueError(
                f"Plugin '{key}' may not emit '{event}': emit only the bare event name; "
                f"the namespace is forced to '{key}:' and the '{HERMES_EVENT_NAMESPACE}:' "
                f"prefix is reserved for core")
        if payload is not None and not isinstance(payload, dict):
            raise TypeError(f"Plugin '{key}' emit() payload must be a dict or None")
        return self._bus.dispatch(f"{key}:{event}", payload or {})

    def subscribe(self, event, callback) -> None:
        if not event or not isinstance(event, str):
            raise ValueError(f"Plugin '{self.plugin_id}' subscribe() requires a non-empty event name")
        if not callable(callback):
            raise TypeError("Event subscriber callback must be callable")
        self._bus.subscribe(self.plugin_id, event, callback)

    # -- other plugins, settings, capabilities -----------------------------
    def has_plugin(self, plugin_id: str) -> bool:
        """Whether another plugin is loaded on this host (key or manifest name)."""
        return plugin_id != self.plugin_id and self._bus.has_plugin(plugin_id)

    def _entry(self) -> dict:
        """``plugins.entries.<id>``: plughost's ``config.json`` over Hermes's ``config.yaml``."""
        merged: dict = {}
        for document in (_hermes_config(self._home), _plughost_config(self._plughost_home)):
            entry = _dig(document, ("plugins", "entries", self.plugin_id))
            if isinstance(entry, dict):
                merged = _merge(merged, entry)
        return merged

    def get_config(self, key, default=None):
        value = _dig(self._entry().get("settings"), _segments(key, self.plugin_id), _MISSING)
        return default if value is _MISSING else value

    def set_config(self, key, value) -> None:
        import _plughost_hermes

        segments = _segments(key, self.plugin_id)
        _plughost_hermes.write_plugin_setting(
            str(self._plughost_home), self.plugin_id, list(segments), json.dumps(value))

    def has_capability(self, name) -> bool:
        """Granted by the operator: ``plugins.entries.<id>.capabilities``, a
        list of names or a mapping of name to true (default: none)."""
        granted = self._entry().get("capabilities")
        if isinstance(granted, dict):
            return granted.get(name) is True
        return isinstance(granted, list) and name in granted

    # -- sub-agents, @-references, terminal backends ------------------------
    @property
    def subagent_lifecycle(self):
        """Hermes's ``SubagentLifecycleService`` over plughost's ``delegate``."""
        if self._subagents is None:
            from agent.subagent_lifecycle import SubagentLifecycleService

            self._subagents = SubagentLifecycleService()
        return self._subagents

    def register_platform(self, name, label, adapter_factory, check_fn, validate_config=None,
                          required_env=None, install_hint="", **entry_kwargs) -> None:
        """A messaging platform, run by ``plughost serve``'s gateway once this
        plugin has loaded (docs/gateway.md)."""
        from gateway.platform_registry import _plughost_register

        self._platforms.append(_plughost_register(
            self.plugin_id, (), name=name, label=label, adapter_factory=adapter_factory,
            check_fn=check_fn, validate_config=validate_config, required_env=required_env,
            install_hint=install_hint, **entry_kwargs))

    def register_context_reference(self, provider) -> None:
        from agent.context_references import ContextReferenceProvider, check_provider

        if not isinstance(provider, ContextReferenceProvider):
            logger.warning("Plugin '%s' tried to register a context reference provider that is not a "
                           "ContextReferenceProvider (%s); ignored", self.plugin_id, type(provider).__name__)
            return None
        try:
            prefix = check_provider(provider, self._references)
        except ValueError as exc:
            logger.warning("Plugin '%s' context reference registration failed: %s", self.plugin_id, exc)
            return None
        self._references[prefix] = provider
        logger.info("Plugin '%s' registered context reference: @%s:", self.plugin_id, prefix)

    def expand_references(self, text: str) -> str:
        """``text`` with this plugin's ``@<prefix>:`` references expanded (Hermes's sync wrapper)."""
        from agent.context_references import expand_message

        coro = expand_message(text, dict(self._references))
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coro).result()

    def register_terminal_environment_provider(self, provider):
        from agent.terminal_env_provider import TerminalEnvironmentProvider

        if not isinstance(provider, TerminalEnvironmentProvider):
            logger.warning("Plugin '%s' tried to register a terminal environment provider that is not a "
                           "TerminalEnvironmentProvider (%s); ignored", self.plugin_id, type(provider).__name__)
            return None
        try:
            name = self._bus.add_terminal_provider(self.plugin_id, provider)
        except ValueError as exc:
            logger.warning("Plugin '%s' terminal environment provider registration failed: %s", self.plugin_id, exc)
            return None
        self._backends[name] = provider
        logger.info("Plugin '%s' registered terminal environment provider: %s", self.plugin_id, name)
        return provider

    def terminal_backend(self):
        """``(name, where it is set)``: Hermes's active backend (``TERMINAL_ENV``, else
        ``terminal.backend`` of ``config.yaml``, else ``local``)."""
        env = os.environ.get("TERMINAL_ENV", "").strip().lower()
        if env:
            return env, "TERMINAL_ENV"
        terminal = _hermes_config(self._home).get("terminal")
        name = str(terminal.get("backend") or "").strip().lower() if isinstance(terminal, dict) else ""
        return (name, "terminal.backend in config.yaml") if name else ("local", "the default")

    def terminal_handler(self):
        """The handler of plughost's ``exec`` (Hermes's ``terminal``) running through this
        plugin's active backend, or ``None`` when ``terminal.backend`` names none of its backends."""
        name, _where = self.terminal_backend()
        provider = self._backends.get(name)
        if provider is None:
            return None
        from agent.terminal_env_provider import run_command

        terminal = _hermes_config(self._home).get("terminal")
        base = str((terminal.get("cwd") if isinstance(terminal, dict) else None) or os.getcwd())

        def terminal(args, task_id=None, **_kw):
            key = task_id or "default"
            env = self._environments.get(key)
            if env is None:
                env = provider.create_environment(cwd=base, timeout=180, task_id=key)
                self._environments[key] = env
            return run_command(env, args, base)

        return terminal

    def doctor_lines(self) -> list:
        lines = [f"context reference @{p}: expanded where a user message names @{p}:<target>"
                 for p in sorted(self._references)]
        name, where = self.terminal_backend()
        for backend in sorted(self._backends):
            if backend == name:
                lines.append(f"terminal backend {backend}: active ({where}); exec (Hermes's terminal) runs through it")
            else:
                lines.append(f"terminal backend {backend}: not active: {where} names '{name}', so exec runs "
                             f"locally (set terminal.backend: {backend} in config.yaml to use it)")
        return lines

    # -- state and profile ------------------------------------------------
    @property
    def state(self) -> PluginState:
        if self._state is None:
            safe = self.plugin_id.replace("/", "__")
            self._state = PluginState(self._home / "plugin_state" / f"{safe}.json")
        return self._state

    @property
    def profile_name(self) -> str:
        """``default`` for ``~/.hermes``, ``<name>`` for ``~/.hermes/profiles/<name>``, else ``custom``."""
        try:
            home = self._home.resolve()
            root = (Path.home() / ".hermes").resolve()
            if home == root:
                return "default"
            parts = home.relative_to(root / "profiles").parts
            return parts[0] if len(parts) == 1 and parts[0] else "custom"
        except (OSError, RuntimeError, ValueError):
            return "custom"


#: The members of Hermes's context served from :class:`PluginRuntime`.
MEMBERS = frozenset({
    "on_unload", "spawn_task", "emit", "subscribe", "state", "profile_name",
    "platform_actions", "subagent_lifecycle", "has_plugin", "get_config", "set_config",
    "has_capability", "register_context_reference", "register_terminal_environment_provider",
    "register_platform", "_bus",
})


def calling_bus():
    """The bus of the host whose plugin is registering now (``None`` outside ``register``)."""
    import _plughost_hermes

    ctx = _plughost_hermes.current_context()
    return None if ctx is None else ctx._bus


def member(runtime: PluginRuntime, name: str):
    return getattr(runtime, name)
