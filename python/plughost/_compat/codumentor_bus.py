"""plughost's Codumentor bus: ``bus.on``/``bus.emit``, the handler chain, and
the last-resort finder serving the compat ``codumentor`` package.

Loaded by the Rust dialect as ``_plughost_codumentor``; plugins only see the
:class:`HookBus` instance handed to their ``register(self, bus)``.

The chain (:func:`fire`) is the seed's "Hook Return Values" table: handlers
run in ``(priority, registration order)``, each sees the payload the previous
one left, ``continue``+``patch`` merges, ``replace`` (or a dict without
``type``) replaces, ``jsonpatch`` applies RFC 6902 ops when the ``jsonpatch``
package is importable, ``abort``/``defer`` stop this event's chain,
``retry`` sleeps.  Every other answer the event honours is handed back as a
decision for the Rust side to execute; a handler that raises, hangs past the
budget or answers a known type with the wrong fields is reported and
skipped (fail open).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
import time

#: module name -> (source, is a package)
SOURCES: "dict[str, tuple[str, bool]]" = {}

#: Which answer types each event honours beyond the chain-control ones.
HONOURED = {
    "onAfterInput": {"short_circuit"},
    "onAfterLLM": {"short_circuit", "enqueue_tool"},
    "onAfterTool": {"short_circuit", "insert_step", "requeue_tool"},
    "onToolInvokeStart": {"veto_tool", "abort_turn"},
    "onLLMCallStart": {"param_patch"},
    "onAfterPromptAssemble": {"insert_step"},
    "onToolInvokeEnd": {"retry_with"},
    "onLLMError": {"llm_retry"},
    "onLLMStream": {"stream_control"},
}

#: Answer types the seed defines that only matter on out-of-scope events
#: or are inert (``fallback_model``): ignored, as the seed says.
IGNORED = {"fallback_model", "at_items", "at_content", "report_collect"}


class _Loader(importlib.abc.Loader):
    def __init__(self, source: str) -> None:
        self._source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        exec(compile(self._source, f"<plughost:{module.__name__}>", "exec"), module.__dict__)


class CodumentorCompatFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`SOURCES` for names no other finder found; submodules
    only while ``codumentor`` itself is plughost's (never mixed into a real one)."""

    def find_spec(self, fullname, path=None, target=None):
        entry = SOURCES.get(fullname)
        if entry is None:
            return None
        if fullname != "codumentor":
            if not _is_compat(sys.modules.get("codumentor")):
                return None
        source, is_package = entry
        return importlib.util.spec_from_loader(
            fullname, _Loader(source), origin=f"<plughost:{fullname}>", is_package=is_package
        )


def _is_compat(module) -> bool:
    spec = getattr(module, "__spec__", None)
    return str(getattr(spec, "origin", "")).startswith("<plughost:")


def install(sources: "dict[str, tuple[str, bool]]") -> None:
    """Register the compat sources and put the finder last on ``sys.meta_path`` (once)."""
    SOURCES.update(sources)
    if not any(isinstance(f, CodumentorCompatFinder) for f in sys.meta_path):
        sys.meta_path.append(CodumentorCompatFinder())


def origin() -> str:
    """Where ``codumentor`` comes from: a real installation's path, or compat."""
    module = sys.modules.get("codumentor")
    spec = getattr(module, "__spec__", None) if module is not None else importlib.util.find_spec("codumentor")
    if spec is None:
        return "not importable"
    where = str(spec.origin or "")
    return "compat (plughost's own codumentor modules)" if where.startswith("<plughost:") else where


def label(handler) -> str:
    """``module.qualname`` of a handler, for reports."""
    func = getattr(handler, "__func__", handler)
    module = getattr(func, "__module__", None) or "?"
    name = getattr(func, "__qualname__", None) or type(handler).__name__
    return f"{module}.{name}"


class Entry:
    """One ``bus.on`` subscription."""

    __slots__ = ("plugin", "event", "handler", "priority", "seq", "label")

    def __init__(self, plugin, event, handler, priority, seq):
        self.plugin = plugin
        self.event = event
        self.handler = handler
        self.priority = priority
        self.seq = seq
        self.label = label(handler)


class Table:
    """Every subscription of one host, for ``bus.emit``."""

    def __init__(self) -> None:
        self.entries: "list[Entry]" = []
        self.seq = 0

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)

    def remove(self, entry: Entry) -> None:
        try:
            self.entries.remove(entry)
        except ValueError:
            pass

    def ordered(self, event: str) -> "list[Entry]":
        return sorted((e for e in self.entries if e.event == event), key=lambda e: (e.priority, e.seq))


class HookBus:
    """The ``bus`` a Codumentor plugin's ``register(self, bus)`` receives."""

    def __init__(self, plugin: str, table: Table, record) -> None:
        self._plugin = plugin
        self._table = table
        self._record = record  # Rust: record(event, handler, priority, entry)
        self._open = True
        self._entries: "list[Entry]" = []

    def on(self, event, handler, priority=100) -> None:
        if not self._open:
            raise RuntimeError(
                f"plugin '{self._plugin}' subscribed to {event!r} after register(bus) returned; "
                "subscribe inside register(bus)"
            )
        if not isinstance(event, str) or not event:
            raise TypeError(f"bus.on: event must be a non-empty string, got {type(event).__name__}")
        if not callable(handler):
            raise TypeError(f"bus.on({event!r}): handler must be callable, got {type(handler).__name__}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"bus.on({event!r}): priority must be an int, got {type(priority).__name__}")
        self._table.seq += 1
        entry = Entry(self._plugin, event, handler, priority, self._table.seq)
        self._record(event, handler, priority, entry)
        self._entries.append(entry)
        self._table.add(entry)

    async def emit(self, event, payload=None, agent=None, ctx=None):
        """Fire ``event`` to every Codumentor handler (chained) and return the final payload."""
        result, _decisions, failures = await fire(
            self._table.ordered(event), event, agent, {} if ctx is None else ctx, payload or {}, None
        )
        for failure in failures:
            _warn(failure)
        return result

    def _close(self, committed: bool) -> None:
        self._open = False
        if not committed:
            for entry in self._entries:
                self._table.remove(entry)
            self._entries.clear()


def _warn(failure) -> None:
    import logging

    plugin, handler, _kind, message = failure
    logging.getLogger("plughost.codumentor").warning(
        "hook handler %s of plugin '%s' failed: %s", handler, plugin, message
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _wrong(answer, why: str) -> str:
    return f"answered {_short(answer)}: {why}; the answer is ignored"


def _decision(event: str, answer: dict):
    """The decision a typed answer asks for on ``event``: ``(decision, None)``,
    ``(None, None)`` when ignored, or ``(None, problem)`` for a wrong shape."""
    kind = answer.get("type")
    if kind in IGNORED or kind not in HONOURED.get(event, ()):
        return None, None
    if kind == "short_circuit":
        text = answer.get("assistant_text")
        if not isinstance(text, str):
            return None, _wrong(answer, "short_circuit needs a string 'assistant_text'")
        return {"type": kind, "assistant_text": text}, None
    if kind == "veto_tool":
        reason = answer.get("reason", "")
        if not isinstance(reason, str):
            return None, _wrong(answer, "veto_tool's 'reason' must be a string")
        return {"type": kind, "reason": reason}, None
    if kind == "abort_turn":
        reason, text = answer.get("reason", ""), answer.get("assistant_text", "")
        if not isinstance(reason, str) or not isinstance(text, str):
            return None, _wrong(answer, "abort_turn's 'reason' and 'assistant_text' must be strings")
        return {"type": kind, "reason": reason, "assistant_text": text}, None
    if kind == "param_patch":
        model, params = answer.get("model"), answer.get("params", {})
        if (model is not None and not isinstance(model, str)) or not isinstance(params, dict):
            return None, _wrong(answer, "param_patch takes a string 'model' and a dict 'params'")
        return {"type": kind, "model": model, "params": params}, None
    if kind == "insert_step":
        messages = answer.get("messages")
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
        ):
            return None, _wrong(answer, "insert_step needs 'messages', a list of {role, content} dicts")
        return {"type": kind, "messages": messages}, None
    if kind == "enqueue_tool":
        tool, args = answer.get("tool"), answer.get("args", {})
        if not isinstance(tool, str) or not tool or not isinstance(args, dict):
            return None, _wrong(answer, "enqueue_tool needs a string 'tool' and a dict 'args'")
        return {"type": kind, "tool": tool, "args": args}, None
    if kind == "requeue_tool":
        return {"type": kind}, None
    if kind == "retry_with":
        args, backoff = answer.get("patched_args"), answer.get("backoff_ms", 0)
        if not isinstance(args, dict) or isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
            return None, _wrong(answer, "retry_with needs a dict 'patched_args' and a non-negative 'backoff_ms'")
        return {"type": kind, "patched_args": args, "backoff_ms": int(backoff)}, None
    if kind == "llm_retry":
        return {"type": kind}, None
    if kind == "stream_control":
        abort, delta = answer.get("abort", False), answer.get("replace_delta")
        if not isinstance(abort, bool) or (delta is not None and not isinstance(delta, str)):
            return None, _wrong(answer, "stream_control takes a bool 'abort' and a string 'replace_delta'")
        return {"type": kind, "abort": abort, "replace_delta": delta}, None
    return None, None


def _jsonpatch(payload, ops):
    try:
        import jsonpatch  # the seed's optional dependency
    except ImportError:
        import logging

        logging.getLogger("plughost.codumentor").warning(
            "a jsonpatch answer was skipped: the jsonpatch package is not installed (pip install jsonpatch)"
        )
        return payload
    return jsonpatch.apply_patch(payload, ops)


async def _call(entry: Entry, agent, ctx, payload, budget):
    """Run one handler; ``(answer, None)`` or ``(None, (kind, message))``."""
    import asyncio

    started = time.monotonic()
    try:
        result = entry.handler(agent, ctx, payload)
        if inspect.isawaitable(result):
            if budget is None:
                result = await result
            else:
                try:
                    result = await asyncio.wait_for(result, budget)
                except asyncio.TimeoutError:
                    return None, ("timed_out", f"timed out after {_secs(budget)} s and was skipped", None)
        elif budget is not None and time.monotonic() - started > budget:
            return None, ("overran", f"took longer than its {_secs(budget)} s budget; its answer is ignored", None)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # SystemExit/KeyboardInterrupt too: one handler's failure
        return None, ("raised", _describe(exc), exc)
    return result, None


def _secs(budget) -> str:
    return str(int(budget)) if float(budget).is_integer() else str(budget)


async def step(entry, event, agent, ctx, payload, budget):
    """Run one handler of a chain.

    Returns ``(payload, decision, failure, stop)``: the payload as the
    handler leaves it, the decision of an honoured answer (a dict with its
    ``type`` and ``plugin``) or None, ``(plugin, handler, kind, message,
    exception or None)`` when its answer was not used, and whether the chain
    stops here.
    """
    import asyncio

    _RUNNING.append(entry.plugin)
    try:
        answer, failure = await _call(entry, agent, ctx, payload, budget)
    finally:
        _RUNNING.pop()
    if failure is not None:
        return payload, None, (entry.plugin, entry.label, *failure), False

    def wrong(why):
        return payload, None, (entry.plugin, entry.label, "wrong_shape", _wrong(answer, why), None), False

    if answer is None or not isinstance(answer, dict):
        return payload, None, None, False  # None: no-op; anything but a dict is ignored (the seed)
    if "type" not in answer:
        return answer, None, None, False  # whole-payload replacement, silently (the seed)
    kind = answer.get("type")
    if kind == "continue":
        patch = answer.get("patch")
        if patch is None:
            return payload, None, None, False
        if not isinstance(patch, dict):
            return wrong("'patch' must be a dict")
        return {**payload, **patch}, None, None, False
    if kind == "replace":
        value = answer.get("value")
        if not isinstance(value, dict):
            return wrong("replace needs a dict 'value'")
        return value, None, None, False
    if kind == "jsonpatch":
        ops = answer.get("ops")
        if not isinstance(ops, list):
            return wrong("jsonpatch needs a list 'ops'")
        try:
            return _jsonpatch(payload, ops), None, None, False
        except Exception as exc:  # a failed op: the payload stays as it was
            return wrong(_describe(exc))
    if kind in ("abort", "defer"):
        return payload, None, None, True
    if kind == "retry":
        delay = answer.get("delay_ms", 0)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            return wrong("retry needs a non-negative 'delay_ms'")
        seconds = delay / 1000.0
        if budget is not None:
            seconds = min(seconds, budget)
        await asyncio.sleep(seconds)
        return payload, None, None, False
    decision, problem = _decision(event, answer)
    if problem is not None:
        return payload, None, (entry.plugin, entry.label, "wrong_shape", problem, None), False
    if decision is not None:
        decision["plugin"] = entry.plugin
    return payload, decision, None, False


async def fire(entries, event, agent, ctx, payload, budget):
    """Run ``entries`` for ``event`` as a chain (:func:`step` each).

    Returns ``(payload, decisions, failures)``: the final payload, the
    decisions in handler order, and the failures.
    """
    decisions = []
    failures = []
    for entry in entries:
        payload, decision, failure, stop = await step(entry, event, agent, ctx, payload, budget)
        if failure is not None:
            failures.append(failure[:4])
        if decision is not None:
            decisions.append(decision)
        if stop:
            break
    return payload, decisions, failures


# ── Per-turn objects: ctx, the agent facade, runtime tools ──────────────


class BehaviorConfig:
    """``agent.behavior_config``: plughost agents have no model role."""

    model_role = None


class ToolRegistry:
    """``agent.tool_registry``: tools a plugin registers during turns (one per host)."""

    def __init__(self) -> None:
        self.tools: "dict[str, object]" = {}
        self.owners: "dict[str, str]" = {}

    def register_tool(self, tool) -> None:
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError("tool_registry.register_tool: the tool needs a non-empty string .name")
        if not callable(getattr(tool, "execute", None)) and not callable(getattr(tool, "call", None)):
            raise TypeError(f"tool_registry.register_tool({name!r}): the tool has no execute(arguments)")
        if name in self.tools and self.tools[name] is not tool:
            import logging

            logging.getLogger("plughost.codumentor").warning(
                "tool '%s' registered through agent.tool_registry replaces an earlier one (last writer wins)", name
            )
        self.tools[name] = tool
        self.owners[name] = _current_plugin()

    def get_tool(self, name):
        return self.tools.get(name)

    def list_tools(self):
        return list(self.tools.values())


#: The plugin whose handler is running (for tool ownership).
_RUNNING = [""]


def _current_plugin() -> str:
    return _RUNNING[-1]


class Agent:
    """The ``agent`` handlers receive."""

    def __init__(self, kind, session_id, model, tool_registry) -> None:
        self.kind = kind
        self.session_id = session_id
        self.model = model
        self.tool_registry = tool_registry
        self.behavior_config = BehaviorConfig()


REGISTRIES: "dict[str, ToolRegistry]" = {}


def registry_for(home: str) -> ToolRegistry:
    registry = REGISTRIES.get(home)
    if registry is None:
        registry = REGISTRIES[home] = ToolRegistry()
    return registry


def new_turn(home, host, session_id, turn_id, user_id, channel, model, kind):
    """``(agent, ctx, ui_events)`` for one turn: one ctx dict shared by every handler."""
    ui_events = []

    async def ui_event_emitter(event_type, data=None, status=None):
        record = {"type": event_type, "data": data}
        if status is not None:
            record["status"] = status
        ui_events.append(record)
        import logging

        logging.getLogger("plughost.codumentor").debug("ui event %s: %r", event_type, data)

    ctx = {
        "session_id": session_id,
        "conversation_id": session_id,
        "turn_id": turn_id,
        "step": 0,
        "user_id": user_id,
        "channel": channel,
        "plugin_host": host,
        "ui_event_emitter": ui_event_emitter,
        "deferred_revision_jobs": [],
    }
    agent = Agent(kind, session_id, model, registry_for(home))
    return agent, ctx, ui_events


def tool_definition(home: str, name: str):
    """``(description, parameters, owner)`` of a runtime tool, or None."""
    registry = REGISTRIES.get(home)
    tool = registry.tools.get(name) if registry else None
    if tool is None:
        return None
    schema = tool.get_parameters_schema() if hasattr(tool, "get_parameters_schema") else {"type": "object"}
    return getattr(tool, "description", "") or "", schema, registry.owners.get(name, "")


async def run_tool(home: str, name: str, arguments: dict):
    """Run a runtime tool: ``(text, success)``; ``tool.call`` runs ``execute``."""
    tool = REGISTRIES[home].tools[name]
    runner = getattr(tool, "call", None) or tool.execute
    result = await runner(arguments) if inspect.iscoroutinefunction(runner) else runner(arguments)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return "", True
    render = getattr(result, "llm_content", None)
    if callable(render):
        return str(render()), bool(getattr(result, "success", True))
    return str(result), True
