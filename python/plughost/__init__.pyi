"""plughost: run Python agent plugins unmodified inside a fast Rust runtime.

The Python contract of the `plughost` package, checked against the built
extension module (`plughost._native`) by mypy's `stubtest`.

`PluginInfo`, `PluginFailure`, `ToolInfo` and `TurnReport` (with its parts
`ToolCallReport`, `ModelCall`, `HookError`, `TurnTimings`) exist only for
type checkers (import them under `typing.TYPE_CHECKING`); at runtime
`Host.plugins()`, `Host.tools()` and `Agent.run()` return plain dicts of
those shapes.
"""

import os
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import (
    Any,
    Generic,
    Literal,
    NotRequired,
    Self,
    TypedDict,
    TypeVar,
    final,
    overload,
    type_check_only,
)

__all__ = [
    "Agent",
    "Call",
    "CommandNotFound",
    "ConfigError",
    "Host",
    "ModelError",
    "PlughostError",
    "PluginContext",
    "SkillNotFound",
]

_T_co = TypeVar("_T_co", covariant=True)

_StrPath = str | os.PathLike[str]
# A tool handler is called as `handler(**arguments)` (arguments it does not
# accept are dropped), sync or async; its result is shown with `str()`, None
# as "".
_ToolHandler = Callable[..., Any]
# A hook callback is called as `callback(ctx)` with the event's context
# object, sync or async; it may answer with an action, a str or None.
_HookCallback = Callable[[Any], Any]
# A slash command handler is called as `handler(raw_args)`; its reply, or
# None for no reply, sync or async.
_CommandHandler = Callable[[str], str | None | Awaitable[str | None]]

# ── Errors ───────────────────────────────────────────────────────

class PlughostError(Exception):
    """Base class of plughost's errors."""

class ConfigError(PlughostError):
    """`config.json` or a constructor argument is unusable.

    Raised when a `Host` loads (its first use) with an unreadable or invalid
    `config.json` or an unusable workspace, and by `Agent(...)` for a bad
    model spec, script or `tool_timeout`.
    """

class CommandNotFound(PlughostError):
    """No slash command of that name (or the line is not a slash command)."""

class SkillNotFound(PlughostError):
    """No skill of that name."""

class ModelError(PlughostError):
    """The model call of an agent turn failed."""

# ── Shapes of the lists `Host.plugins()` and `Host.tools()` return ─

@type_check_only
class PluginFailure(TypedDict):
    """Why loading a plugin raised: `PluginInfo["failure"]`."""

    type: str
    """The exception type (`ModuleNotFoundError`); empty for a native error."""
    message: str
    """The exception's message (`str(exc)`)."""
    traceback: NotRequired[str]
    """The formatted Python traceback."""
    location: NotRequired[str]
    """`file:line` of the innermost frame of plugin code."""
    base_exception: NotRequired[bool]
    """Present (and True) when the exception is a `BaseException` that is not
    an `Exception` (`SystemExit`, `KeyboardInterrupt`), contained by plughost."""

@type_check_only
class PluginInfo(TypedDict):
    """One discovered plugin and what became of it, as one entry of
    `plughost plugins list --json`."""

    key: str
    """The plugin's key: its manifest name, else its directory name."""
    name: str
    """The manifest name (the key when there is no usable manifest)."""
    version: str
    """The manifest version; "" when not given."""
    description: str
    """The manifest description; "" when not given."""
    author: str
    """The manifest author; "" when not given."""
    source: Literal["bundled", "entrypoint", "user", "project"]
    """Where the plugin was found: `entrypoint` for an installed
    distribution's entry point (Felix's `felix.plugins`, Hermes's
    `hermes_agent.plugins`) on `sys.path` or in the active virtualenv."""
    kind: Literal["standalone", "backend", "exclusive"]
    """The manifest kind; `standalone` and `backend` plugins load."""
    enabled: bool
    """Selected by the enablement rules."""
    status: Literal["loaded", "failed", "skipped", "disabled", "not-enabled"]
    """`loaded`; `failed` (enabled but broken); `skipped` (an unsupported
    kind); `disabled` (in `plugins.disabled`); `not-enabled`."""
    loaded: bool
    """Imported and registered without error."""
    error: str | None
    """Why it is not loaded (not enabled, disabled, a failure), else None."""
    failure: NotRequired[PluginFailure]
    """Present when loading raised: the exception behind `error`."""
    dialect: NotRequired[str]
    """The plugin API it is loaded through (`flowly`, `hermes`,
    `codumentor`, `felix`); absent for direct registrations."""
    entry: str | None
    """What its dialect loads: `module:Class` (Codumentor),
    `module:register` (Felix); None for Flowly."""
    dependencies: list[str]
    """Keys of the plugins it loads after (Codumentor's `dependencies`);
    empty for the other dialects."""
    path: str
    """The plugin's directory (for an installed distribution, the
    `sys.path` directory it is installed in)."""
    tools: list[str]
    """Names of the tools it registered."""
    hooks: list[str]
    """Names of the hook events it registered for."""
    commands: list[str]
    """Names of the slash commands it registered (without the `/`)."""
    skills: list[str]
    """Qualified `plugin:name` names of the skills it registered."""
    requires_env: list[str]
    """Names of the environment variables its manifest declares it needs."""
    provides_web_providers: list[str]
    """The web search/extract backends its manifest declares (`kind: backend`)."""
    isolated: bool
    """Runs in a worker process of its own (`plugins.isolate`, `--isolate`)."""
    lock: LockEntry | None
    """Its entry of `<home>/plugins.lock.json` (a user plugin that
    `plugins install` placed); None for the others (docs/plugin-lock.md)."""

@type_check_only
class LockCapabilities(TypedDict):
    """What a plugin's manifest declares it registers."""

    hooks: list[str]
    tools: list[str]
    web_providers: list[str]

@type_check_only
class LockEntry(TypedDict):
    """What one plugin was when it was installed or last accepted."""

    source: str
    """What `plugins install` takes to get it again (a git URL or a directory)."""
    commit: str | None
    """The commit checked out (git sources); None for a local directory."""
    hash: str | None
    """`sha256:<hex>` over its files; None for an editable install."""
    files: dict[str, str]
    """Each file's `sha256:<hex>`, by relative path."""
    dialect: str
    version: str
    capabilities: LockCapabilities
    editable: bool
    """A development install (`--editable`): never checked."""

@type_check_only
class ToolInfo(TypedDict):
    """One tool, as one entry of `plughost tools list --json`."""

    name: str
    """The tool's name."""
    description: str
    """The tool's description ("" when none was given)."""
    parameters: dict[str, Any]
    """The JSON Schema of its arguments (unwrapped from any OpenAI envelope)."""
    plugin: str
    """Key of the plugin that registered it: `python` for direct
    registrations on a Host, `builtin` for the built-in tools (`builtin_tools`),
    `native` for other Rust tools."""
    toolset: str
    """The tool's group (Flowly's `toolset=`); "" when none."""
    requires_env: list[str]
    """Environment variables the tool needs; unset, it is unavailable."""

# ── Shape of the report `Agent.run()` returns ───────────────────

@type_check_only
class ToolCallReport(TypedDict):
    """One tool call of a turn: `TurnReport["tool_calls"]`."""

    id: str
    """The call's id (the model's, or `enq_<n>` for a call a plugin added)."""
    name: str
    """The tool's name."""
    arguments: Any
    """The arguments the tool was called with (JSON-like)."""
    result: str
    """The result text the model saw, after every hook (a veto's
    `[blocked: <reason>]`, Felix's `[error/blocked] <reason>`, ...)."""
    outcome: Literal[
        "ok", "raised", "unavailable", "check_failed", "blocked", "invalid_arguments", "not_found", "timed_out", "cancelled"
    ]
    """How the call ended."""
    details: dict[str, Any] | None
    """The particulars of a failed outcome (the exception, the block's
    message, what is wrong with the arguments); None for `ok`."""
    duration_ms: float
    """How long the call took."""

@type_check_only
class ModelCall(TypedDict):
    """What one provider call was sent, after every hook of every dialect:
    `TurnReport["model_calls"]`."""

    iteration: int
    """The turn's iteration (1-based)."""
    model: str
    """The model, after any `param_patch`."""
    params: dict[str, Any]
    """The call's parameters, after any `param_patch`."""
    messages: list[dict[str, Any]]
    """The exact OpenAI-format messages sent, system prompt first: prompt
    patches are here and never in the transcript."""
    tools: list[str]
    """The names of the tools offered."""

@type_check_only
class HookError(TypedDict):
    """One failed hook call of a turn: `TurnReport["hook_errors"]`. The
    hook was skipped (hooks fail open) and the turn went on."""

    plugin: str
    """The plugin's key."""
    dialect: str
    """Its dialect (`flowly`, `hermes`, `codumentor`, `felix`)."""
    event: str
    """The dialect's own name of the event (`onPromptAssemble`, `before_tool`)."""
    handler: str
    """`module.qualname` of the callback."""
    error: str
    """`<ExceptionType>: <message>`, `timed out after N s and was skipped`,
    or a sentence naming a wrong-shape answer."""

@type_check_only
class TurnTimings(TypedDict):
    """Where a turn's time went: `TurnReport["timings"]`."""

    total_ms: float
    model_ms: float
    tools_ms: float

@type_check_only
class TurnReport(TypedDict):
    """Everything about one turn, as `plughost run --json` prints it."""

    session_key: str
    """The session the turn belongs to."""
    input: str
    """The inbound message as received (before any plugin rewrote it)."""
    reply: str | None
    """The reply; None when a plugin dropped the message or a command gave none."""
    skipped: str | None
    """Why a plugin dropped the message (`pre_gateway_dispatch`), else None."""
    command: bool
    """The message was a slash command."""
    iterations: int
    """How many model calls the turn made."""
    tool_calls: list[ToolCallReport]
    """Every tool call, in order."""
    messages: list[dict[str, Any]]
    """The messages appended to the session's transcript this turn."""
    usage: dict[str, Any]
    """Token usage as the provider reported it."""
    timings: TurnTimings
    """Where the time went."""
    completed: bool
    """The turn finished (an `abort_turn` is a completed turn)."""
    interrupted: bool
    """The turn was cancelled."""
    hit_iteration_cap: bool
    """The turn stopped at `max_iterations` without a final answer."""
    error: str | None
    """Why the turn failed (a failed model call), else None."""
    model_calls: list[ModelCall]
    """What each provider call was sent, after every hook; `[]` when no
    model call was made (a `short_circuit` before the model)."""
    hook_errors: list[HookError]
    """Every hook call of this turn that failed."""
    aborted: str | None
    """The `abort_turn` reason, when a plugin aborted the turn."""
    ended_by: Literal[
        "answer", "short_circuit", "aborted", "tool_terminate", "iteration_cap", "skipped", "command", "error", "interrupted"
    ]
    """How the turn ended."""
    ui_events: list[dict[str, Any]]
    """`{type, data, status?}` records from Codumentor's `ctx["ui_event_emitter"]`."""

# ── Classes ──────────────────────────────────────────────────────

@final
class Call(Generic[_T_co]):
    """An awaitable plughost call; `Call[T]` resolves to a `T` (`str`, or None).

    Returned by `Host.acall_tool`, `Agent.send` and `Agent.shutdown`. Nothing
    runs until it is awaited, and it can be awaited once. Each step runs on
    the awaiting thread inside the awaiting asyncio task, so a plugin
    coroutine the call starts runs on the caller's event loop. Dropping the
    call, `close()`, or cancelling the awaiting task cancels the work it
    started.

    Not constructible from Python. `Call[str]` works in annotations and at
    runtime (a `types.GenericAlias`).
    """

    def __class_getitem__(cls, item: Any) -> Any:
        """`Call[T]`: a generic alias, for annotations evaluated at runtime."""
    def __iter__(self) -> Call[_T_co]:
        """The call itself (it is its own iterator, as `__await__` returns)."""

    def __await__(self) -> Generator[Any, Any, _T_co]:
        """Await the call: returns the call itself, which steps like a generator.

        Returns:
            The call, as the iterator `await` drives; the value of the `await`
            expression is the call's result.
        """
    def __next__(self) -> Any:
        """Take a step, as `send(None)`.

        Returns:
            What the awaiting task should wait on next.

        Raises:
            StopIteration: The call finished; its `value` is the result.
            RuntimeError: The call is being awaited elsewhere at the same time,
                or was already awaited.
            asyncio.CancelledError: The awaiting task was cancelled.
            Exception: Whatever the call raises (see the method that returned
                the call).
        """
    def send(self, value: Any) -> Any:
        """Take a step, resuming what the last step waited on with `value`.

        Arguments:
            value: The result of what the last step yielded (None to start).

        Returns:
            What the awaiting task should wait on next.

        Raises:
            StopIteration: The call finished; its `value` is the result.
            RuntimeError: The call is being awaited elsewhere at the same time,
                or was already awaited.
            asyncio.CancelledError: The awaiting task was cancelled.
            Exception: Whatever the call raises.
        """
    @overload
    def throw(
        self, typ: type[BaseException], value: BaseException | object = None, traceback: TracebackType | None = None
    ) -> Any:
        """Take a step, raising an exception into the call (what the last step
        waited on gets it; while the call waits outside Python, the call is
        abandoned and the exception re-raised).

        Arguments:
            typ: The exception, or its type.
            value: The exception (with `typ` a type); None to instantiate `typ`.
            traceback: Ignored.

        Returns:
            What the awaiting task should wait on next.

        Raises:
            StopIteration: The call finished; its `value` is the result.
            RuntimeError: The call is being awaited elsewhere at the same time,
                or was already awaited.
            BaseException: The exception thrown in, if the call does not
                handle it.
        """
    @overload
    def throw(self, typ: BaseException, value: None = None, traceback: TracebackType | None = None) -> Any: ...
    def close(self) -> None:
        """Give up on the call: cancels the work it started. Never raises."""

@final
class PluginContext:
    """The registration surface a plugin's `register(ctx)` touches
    (`flowly.plugins.PluginContext`), also `Host.context`.

    Registrations are collected until the plugin's `register(ctx)` returns
    (for `Host.context`: until the host loads); registering after that
    raises `RuntimeError`. Not constructible from Python.
    """

    @property
    def name(self) -> str:
        """The plugin's key (its manifest name); `python` for `Host.context`."""
    @property
    def plugin_dir(self) -> Path:
        """The plugin's directory, against which relative skill paths resolve
        (the working directory the Host was created in, for `Host.context`)."""
    def register_tool(
        self,
        name: str,
        schema: Mapping[str, Any] | None = None,
        handler: _ToolHandler | None = None,
        *,
        check_fn: Callable[[], object] | None = None,
        description: str = "",
        toolset: str | None = None,
        requires_env: str | Iterable[str | Mapping[str, Any]] | None = None,
        is_async: object = None,
        emoji: object = None,
    ) -> None:
        """Register a tool.

        Arguments:
            name: The tool's name (surrounding whitespace is trimmed).
            schema: Its arguments: a JSON Schema object, `{"parameters": ...,
                "description": ...}`, or an OpenAI `{"type": "function",
                "function": {...}}` envelope; None for no arguments.
            handler: Called as `handler(**arguments)`, sync or async; its
                result is shown with `str()` (None as ""). Required despite
                the default (Flowly's signature).
            check_fn: Called before each use; a falsy answer makes the tool
                unavailable.
            description: The description; "" (the default) takes the
                schema's.
            toolset: The tool's group (Flowly's keyword), shown by
                `tools list --json`.
            requires_env: Environment variables the tool needs; while one
                is unset (or empty) the tool is unavailable and
                `plugins doctor` names it.
            is_async: Accepted and ignored, as by Flowly (awaitables are
                detected).
            emoji: Accepted and ignored, as by Flowly.

        Raises:
            TypeError: `name` is not a str; `handler` is missing or not
                callable; `check_fn` is not callable; `toolset` is not a
                str; `requires_env` is not a list of names.
            ValueError: `name` is empty; `schema` is not JSON-like.
            RuntimeError: Registration has closed.
        """
    @property
    def manifest(self) -> Any:
        """The plugin's parsed manifest as Flowly's `PluginManifest`
        (`name`, `version`, `description`, `author`, `kind`,
        `manifest_version`, `requires_env`, `provides_tools`,
        `provides_hooks`, `provides_web_providers`, `source`, `path`, `key`)."""
    def register_web_search_provider(self, provider: Any) -> None:
        """Register a web search/extract backend (a
        `flowly.agent.tools.web_providers.base.WebSearchProvider`); it joins
        the provider registry when `register(ctx)` returns without error.

        Raises:
            TypeError: `provider` is not a `WebSearchProvider` with a name.
            RuntimeError: Registration has closed.
        """
    def register_hook(self, event_name: str, callback: _HookCallback) -> None:
        """Register a hook callback for an event (`pre_tool_call`, ...).

        An unknown event name is accepted with a warning; it never fires.

        Arguments:
            event_name: The event's name.
            callback: Called as `callback(ctx)` with the event's context,
                sync or async; may answer with an action or a str.

        Raises:
            TypeError: `event_name` is not a str or `callback` is not callable.
            RuntimeError: Registration has closed.
        """
    def register_command(
        self, name: str, handler: _CommandHandler, description: str = "", args_hint: str = ""
    ) -> None:
        """Register a slash command.

        A reserved name (`new`, `clear`, `compact`, `help`) is refused with a
        warning, without raising.

        Arguments:
            name: The command's name (a leading `/` is dropped).
            handler: Called as `handler(raw_args)` with the text after the
                name, sync or async; its reply, or None.
            description: Shown by `/help`; default "".
            args_hint: The arguments' synopsis, shown by `/help`; default "".

        Raises:
            TypeError: `name` is not a str or `handler` is not callable.
            ValueError: `name` is empty.
            RuntimeError: Registration has closed.
        """
    def register_skill(self, name: str, path: _StrPath, description: str = "") -> None:
        """Register a skill, named `<plugin>:<name>`.

        Arguments:
            name: The skill's name: letters, digits, `_` and `-`, no `:`.
            path: Its Markdown file, or a directory holding `SKILL.md`;
                relative to `plugin_dir`.
            description: What the skill is for; default "".

        Raises:
            TypeError: `name` is not a str or `path` is not a str or
                `os.PathLike`.
            ValueError: `name` is invalid.
            FileNotFoundError: No file at `path`.
            RuntimeError: Registration has closed.
        """

@final
class Host:
    """A plugin host: discovers and loads plugins on first use.

    Loading happens once, on the first use of anything but `context` and the
    `register_*` methods (even when several threads use it first at the same
    time). Safe to use from any thread and any event loop.

    The host starts serving (Felix startup hooks, Codumentor's
    `onServerReady`) once, before its first tool call, command or agent
    turn, as the CLI's `run`, `chat`, `tools call` and `commands run` do;
    listing plugins or tools does not start it.
    """

    def __new__(
        cls,
        home: _StrPath | None = None,
        project_dir: _StrPath | None = None,
        enable: list[str] | tuple[str, ...] | None = None,
        disable: list[str] | tuple[str, ...] | None = None,
        *,
        builtin_tools: bool = False,
        workspace: _StrPath | None = None,
        isolate: str | list[str] | tuple[str, ...] | None = None,
        hook_timeout: float = 30.0,
    ) -> Self:
        """Create a host; nothing is discovered or loaded yet.

        Arguments:
            home: The plughost home; None for `$PLUGHOST_HOME`, else
                `~/.plughost`.
            project_dir: A project whose plugins are discovered too.
            enable: Plugin keys to enable on top of `plugins.enabled`.
            disable: Plugin keys to disable on top of `plugins.disabled`.
            builtin_tools: Add the built-in tools the CLI's agent has: files,
                exec, ... working in `workspace`, `delegate`, and
                `web_search` / `web_extract` (available while a web backend
                plugin's provider is, as in the CLI).
            workspace: The built-in tools' directory (implies
                `builtin_tools`); None for `<home>/workspace`.
            isolate: Plugins to run in worker processes of their own (a
                crash, `os._exit` or a spin then fails only their calls):
                `"all"`, `"none"`, or a list of plugin keys; None for
                the `PLUGHOST_ISOLATE` environment variable when set (as
                the CLI reads it), else `plugins.isolate` in config.json.
            hook_timeout: Seconds an async hook call of any dialect may take
                before it is cancelled, skipped and reported in the turn's
                `hook_errors` (the CLI's `--hook-timeout`); above 0 and at
                most 604800.

        Raises:
            ConfigError: `hook_timeout` is not above 0 and at most 604800,
                or `isolate` is not `"all"`, `"none"` or a list of keys.
            PlughostError: The embedded runtime could not start.
        """
    @staticmethod
    def _worker_main() -> None:
        """The entry of an isolated plugin's worker process (not for direct use)."""
    @property
    def home(self) -> Path:
        """The plughost home in use (loads the host).

        Raises:
            ConfigError: The host could not load.
        """
    @property
    def context(self) -> PluginContext:
        """The `PluginContext` for registering directly on this host (as
        plugin `python`), open until the host loads."""
    def register_tool(
        self,
        name: str,
        schema: Mapping[str, Any] | None = None,
        handler: _ToolHandler | None = None,
        *,
        check_fn: Callable[[], object] | None = None,
        description: str = "",
        toolset: str | None = None,
        requires_env: str | Iterable[str | Mapping[str, Any]] | None = None,
        is_async: object = None,
        emoji: object = None,
    ) -> None:
        """`PluginContext.register_tool` on `context`: register a tool
        directly on this host, before its first use. Flowly's keywords as
        there: `toolset` is kept on the tool (`tools()` lists it), an unset
        `requires_env` variable makes the tool unavailable (naming it),
        `is_async` and `emoji` are accepted and ignored.

        Raises:
            PlughostError: The host has already loaded.
            TypeError, ValueError: As `PluginContext.register_tool`.
        """
    def register_hook(self, event_name: str, callback: _HookCallback) -> None:
        """`PluginContext.register_hook` on `context`: register a hook
        callback directly on this host, before its first use.

        Raises:
            PlughostError: The host has already loaded.
            TypeError: As `PluginContext.register_hook`.
        """
    def register_command(
        self, name: str, handler: _CommandHandler, description: str = "", args_hint: str = ""
    ) -> None:
        """`PluginContext.register_command` on `context`: register a slash
        command directly on this host, before its first use.

        Raises:
            PlughostError: The host has already loaded.
            TypeError, ValueError: As `PluginContext.register_command`.
        """
    def register_skill(self, name: str, path: _StrPath, description: str = "") -> None:
        """`PluginContext.register_skill` on `context`: register a skill
        directly on this host, before its first use; a relative `path` is
        against the working directory the host was created in.

        Raises:
            PlughostError: The host has already loaded.
            TypeError, ValueError, FileNotFoundError: As
                `PluginContext.register_skill`.
        """
    def plugins(self) -> list[PluginInfo]:
        """Every discovered plugin, as `plughost plugins list --json`.

        Returns:
            One `PluginInfo` per plugin, loaded or not.

        Raises:
            ConfigError: The host could not load.
        """
    def tools(self) -> list[ToolInfo]:
        """Every tool, as `plughost tools list --json`.

        Returns:
            One `ToolInfo` per registered tool (when two registered the same
            name, the last one).

        Raises:
            ConfigError: The host could not load.
        """
    def call_tool(self, name: str, args: Mapping[str, Any] | None = None, session_id: str = "") -> str:
        """Run a tool through the full pipeline (hooks, check, handler),
        blocking until it is done; the GIL is released while it waits.

        Arguments:
            name: The tool's name.
            args: Its arguments (JSON-like); None for none.
            session_id: The session the call belongs to, as hooks see it.

        Returns:
            The result string. Tool-level failures (an unknown tool, invalid
            arguments, a handler that raised, a blocking hook) are result
            strings too, as in the CLI, not exceptions.

        Raises:
            ConfigError: The host could not load.
            PlughostError: `args` is not JSON-like.
        """
    def acall_tool(self, name: str, args: Mapping[str, Any] | None = None, session_id: str = "") -> Call[str]:
        """`call_tool` as an awaitable; nothing runs until it is awaited.

        Arguments:
            name: The tool's name.
            args: Its arguments (JSON-like); None for none.
            session_id: The session the call belongs to, as hooks see it;
                default "".

        Returns:
            A `Call` resolving to the result string (tool-level failures are
            result strings, as in `call_tool`).

        Raises:
            ConfigError: The host could not load.
            PlughostError: `args` is not JSON-like.
        """
    def run_command(self, line: str) -> str | None:
        """Run a slash command line (`/name args`).

        Arguments:
            line: The command line, starting with `/`.

        Returns:
            The command's reply, or None when it gave none.

        Raises:
            CommandNotFound: `line` is not a slash command, or no command has
                that name.
            PlughostError: The command's handler failed.
            ConfigError: The host could not load.
        """
    def skill(self, name: str) -> str:
        """The text of a skill.

        Arguments:
            name: The qualified skill name, `plugin:name`.

        Returns:
            The skill file's contents.

        Raises:
            SkillNotFound: No skill has that name.
            PlughostError: The skill's file could not be read.
            ConfigError: The host could not load.
        """

@final
class Agent:
    """The agent loop (model calls, tool calls, hooks, sessions) over a Host."""

    def __new__(
        cls,
        host: Host,
        model: str = "scripted:demo",
        *,
        script: _StrPath | None = None,
        base_url: str | None = None,
        system_prompt: str | None = None,
        max_iterations: int = 25,
        tool_timeout: float = 120.0,
        model_timeout: float = 300.0,
    ) -> Self:
        """Create an agent over `host` (loads the host).

        Arguments:
            host: The host whose tools, hooks and commands the agent uses.
            model: `PROVIDER:MODEL`: `openai:gpt-4o-mini` (reads
                `OPENAI_API_KEY`), `scripted:demo`, `scripted:path/to/script.yaml`.
            script: The script of the `scripted` provider (overrides the spec's).
            base_url: The model API's endpoint: for `openai`, None for
                `$OPENAI_BASE_URL`, else the public OpenAI URL; for a
                plugin's model provider, it replaces the provider's own.
            system_prompt: Replaces the default system prompt.
            max_iterations: Most model calls in one turn (at least 1).
            tool_timeout: Seconds one tool call may take; above 0 and at most
                604800 (a week).
            model_timeout: Seconds the model may stay silent (connecting,
                before its answer, between chunks of it); above 0 and at most
                604800.

        Raises:
            ConfigError: The host could not load, the model spec or script is
                unusable, or a timeout is not above 0 and at most 604800.
            OverflowError: `max_iterations` is negative.
        """
    def send(self, message: str, session_id: str = "default") -> Call[str]:
        """One turn of a session; nothing runs until it is awaited.

        Arguments:
            message: The user's message (a slash command line runs the command).
            session_id: The session the turn belongs to; default "default".

        Returns:
            A `Call` resolving to the reply text ("" when a plugin dropped the
            message or a command gave no reply); awaiting it raises
            `ModelError` when the model call failed.
        """
    def run(self, message: str, session_id: str = "default") -> Call[TurnReport]:
        """One turn of a session, reporting everything about it; nothing
        runs until it is awaited.

        Arguments:
            message: The user's message (a slash command line runs the command).
            session_id: The session the turn belongs to; default "default".

        Returns:
            A `Call` resolving to the turn's `TurnReport`, the document
            `plughost run --json` prints: the reply, the tool calls, what each
            model call was sent (`model_calls`), the hooks that failed
            (`hook_errors`), `aborted`, `ended_by` and `ui_events`. A failed
            model call does not raise: the report has `completed: False`,
            `ended_by: "error"` and the `error`.
        """
    def shutdown(self) -> Call[None]:
        """Fire `on_session_finalize` for every session; nothing runs until
        it is awaited.

        Returns:
            A `Call` resolving to None once every session is finalized.
        """
