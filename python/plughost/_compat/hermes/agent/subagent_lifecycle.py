"""``agent.subagent_lifecycle`` (plughost): Hermes's public lifecycle API
for delegated sub-agents, backed by plughost's ``delegate`` tool.

``PluginContext.subagent_lifecycle`` is a :class:`SubagentLifecycleService`.
``launch`` needs a parent session, as in Hermes: plughost's parent is the
turn whose tool call (or hook) is running now. The child is a plughost
``delegate`` sub-agent run on a worker thread through the host's tool
pipeline (``pre_tool_call`` guards included; ``subagent_start`` and
``subagent_stop`` fire around it). Records live in the service of one
plugin on one host, never in module state.

Differences, each answered as Hermes answers a backend that cannot:
``allowed_toolsets`` is not applied (the child gets plughost's
``subagent_tools``);
``cancel`` reports ``unsupported`` (a plughost sub-agent cannot be
interrupted); ``reconnect`` knows only this process's children.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import hashlib
import hmac
import json
import math
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError
from typing import Any, Mapping, Optional

PUBLIC_CONTRACT_VERSION = 1
_MAX_GOAL_CHARS = 16_000
_MAX_CONTEXT_CHARS = 32_000
_MAX_METADATA_BYTES = 8_192
_MAX_RESULT_CHARS = 32_000


class SubagentLifecycleError(ValueError):
    """A request cannot be safely accepted by the public lifecycle API."""


class SubagentState(str, enum.Enum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"


@dataclasses.dataclass(frozen=True)
class SubagentLaunchRequest:
    goal: str
    context: Optional[str] = None
    role: str = "leaf"
    model: Optional[str] = None
    allowed_toolsets: Optional[tuple] = None
    blocked_tools: tuple = ()
    working_directory: Optional[str] = None
    parent_session_id: Optional[str] = None
    correlation_id: Optional[str] = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    timeout_seconds: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class SubagentHandle:
    contract_version: int
    subagent_id: str
    parent_session_id: Optional[str]
    correlation_id: Optional[str]
    created_at: float
    provider: Optional[str]
    model: Optional[str]
    role: str
    depth: int
    capability: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "SubagentHandle":
        try:
            return cls(**dict(value))
        except (TypeError, ValueError) as exc:
            raise SubagentLifecycleError("Malformed subagent handle.") from exc


@dataclasses.dataclass(frozen=True)
class SubagentStatus:
    handle: SubagentHandle
    state: SubagentState
    updated_at: float
    diagnostic: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SubagentTerminalState:
    handle: SubagentHandle
    state: SubagentState
    completed: bool
    timed_out: bool = False
    diagnostic: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SubagentCancelResult:
    accepted: bool
    already_terminal: bool = False
    unknown_handle: bool = False
    unsupported: bool = False
    state: SubagentState = SubagentState.UNKNOWN


@dataclasses.dataclass(frozen=True)
class SubagentResult:
    handle: SubagentHandle
    terminal_state: SubagentState
    ready: bool
    summary: Optional[str] = None
    structured_payload: Optional[Mapping[str, Any]] = None
    started_at: Optional[float] = None
    completed_at: Optional[float] = None
    error_classification: Optional[str] = None
    error_message: Optional[str] = None
    usage_metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tool_execution_summary: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    result_hash: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SubagentReconnectResult:
    connected: bool
    state: SubagentState
    diagnostic: Optional[str] = None


@dataclasses.dataclass
class _Record:
    handle: SubagentHandle
    state: SubagentState
    updated_at: float
    future: Optional[Future] = None
    started_at: Optional[float] = None
    result: Optional[SubagentResult] = None


def _parent_session() -> Optional[str]:
    import _plughost_hermes

    return _plughost_hermes.calling_session()


class SubagentLifecycleService:
    """The service of :attr:`PluginContext.subagent_lifecycle` (one per plugin)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._records: "dict[str, _Record]" = {}
        self._correlations: "dict[tuple, str]" = {}
        self._secret = secrets.token_bytes(32)
        self._executor: Optional[ThreadPoolExecutor] = None
        self._count = 0

    def launch(self, request: SubagentLaunchRequest) -> SubagentHandle:
        parent = _parent_session()
        if parent is None:
            raise SubagentLifecycleError("No active Hermes parent session is available.")
        self._validate(request)
        if request.parent_session_id and request.parent_session_id != parent:
            raise SubagentLifecycleError("parent_session_id does not match the active session.")
        key = (parent, request.correlation_id or "")
        with self._lock:
            if request.correlation_id and key in self._correlations:
                raise SubagentLifecycleError("Duplicate correlation_id for this parent session.")
            self._count += 1
            subagent_id = f"sa-{self._count}-{secrets.token_hex(4)}"
            created = time.time()
            handle = SubagentHandle(PUBLIC_CONTRACT_VERSION, subagent_id, parent, request.correlation_id,
                                    created, None, request.model, request.role, 1,
                                    self._capability(subagent_id, parent, created))
            record = _Record(handle, SubagentState.PENDING, created)
            self._records[subagent_id] = record
            if request.correlation_id:
                self._correlations[key] = subagent_id
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hermes-lifecycle")
        # The worker keeps the calling turn (its host and session).
        turn = contextvars.copy_context()
        record.future = self._executor.submit(turn.run, self._run, record, request)
        return handle

    def status(self, handle: SubagentHandle) -> SubagentStatus:
        record = self._record(handle)
        if record is None:
            return SubagentStatus(handle, SubagentState.UNKNOWN, time.time(), "UNKNOWN_HANDLE")
        with self._lock:
            return SubagentStatus(record.handle, record.state, record.updated_at)

    def wait(self, handle: SubagentHandle, *, timeout_seconds: Optional[float] = None) -> SubagentTerminalState:
        record = self._record(handle)
        if record is None:
            return SubagentTerminalState(handle, SubagentState.UNKNOWN, True, diagnostic="UNKNOWN_HANDLE")
        if record.future is not None:
            try:
                record.future.result(timeout=timeout_seconds)
            except TimeoutError:
                return SubagentTerminalState(record.handle, record.state, False, True)
            except Exception:
                pass
        with self._lock:
            return SubagentTerminalState(record.handle, record.state, record.result is not None)

    def cancel(self, handle: SubagentHandle, *, reason: str) -> SubagentCancelResult:
        record = self._record(handle)
        if record is None:
            return SubagentCancelResult(False, unknown_handle=True)
        with self._lock:
            if record.result is not None:
                return SubagentCancelResult(False, already_terminal=True, state=record.state)
        # A plughost sub-agent runs to its end: the request cannot be honoured.
        return SubagentCancelResult(False, unsupported=True, state=record.state)

    def result(self, handle: SubagentHandle) -> SubagentResult:
        record = self._record(handle)
        if record is None:
            return SubagentResult(handle, SubagentState.UNKNOWN, False, error_classification="UNKNOWN_HANDLE")
        with self._lock:
            if record.result is not None:
                return record.result
            return SubagentResult(record.handle, record.state, False, error_classification="NOT_READY")

    def reconnect(self, handle: SubagentHandle) -> SubagentReconnectResult:
        record = self._record(handle)
        if record is None:
            return SubagentReconnectResult(False, SubagentState.UNKNOWN, "RECONNECT_UNAVAILABLE")
        with self._lock:
            return SubagentReconnectResult(True, record.state)

    def shutdown(self) -> None:
        """Stop taking work; running children finish (called at unload)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    # -- internals --------------------------------------------------------
    def _record(self, handle) -> Optional[_Record]:
        if not isinstance(handle, SubagentHandle) or handle.contract_version != PUBLIC_CONTRACT_VERSION:
            return None
        if (not isinstance(handle.created_at, (int, float)) or isinstance(handle.created_at, bool)
                or not math.isfinite(handle.created_at) or not isinstance(handle.capability, str)):
            return None
        expected = self._capability(handle.subagent_id, handle.parent_session_id, handle.created_at)
        if not hmac.compare_digest(handle.capability, expected):
            return None
        if _parent_session() != handle.parent_session_id:
            return None
        with self._lock:
            return self._records.get(handle.subagent_id)

    def _run(self, record: _Record, request: SubagentLaunchRequest) -> None:
        import _plughost_hermes

        with self._lock:
            record.state = SubagentState.RUNNING
            record.started_at = record.updated_at = time.time()
        goal = request.goal if not request.context else f"{request.goal}\n\nContext:\n{request.context}"
        # plughost's sub-agent gets the host's sub-agent tools
        # (`subagent_tools`); Hermes's toolset names do not name them.
        args: dict = {"goal": goal}
        try:
            raw = _plughost_hermes.dispatch_tool("delegate_task", args, record.handle.subagent_id)
            error = _error_of(raw)
            state = SubagentState.FAILED if error is not None else SubagentState.SUCCEEDED
            result = SubagentResult(
                record.handle, state, True,
                summary=None if error is not None else str(raw)[:_MAX_RESULT_CHARS],
                started_at=record.started_at, completed_at=time.time(),
                error_classification=None if error is None else "ERROR",
                error_message=None if error is None else str(error)[:_MAX_RESULT_CHARS])
        except Exception as exc:
            result = SubagentResult(record.handle, SubagentState.FAILED, True, started_at=record.started_at,
                                    completed_at=time.time(), error_classification=type(exc).__name__,
                                    error_message=str(exc)[:_MAX_RESULT_CHARS])
        payload = dataclasses.asdict(result)
        payload.pop("result_hash", None)
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        result = dataclasses.replace(result, result_hash=digest)
        with self._lock:
            record.result = result
            record.state = result.terminal_state
            record.updated_at = result.completed_at or time.time()

    def _capability(self, subagent_id: str, parent: Optional[str], created_at: float) -> str:
        value = f"{subagent_id}|{parent or ''}|{created_at:.6f}".encode()
        return hmac.new(self._secret, value, hashlib.sha256).hexdigest()

    @staticmethod
    def _validate(request) -> None:
        if (not isinstance(request, SubagentLaunchRequest) or not isinstance(request.goal, str)
                or not request.goal.strip() or len(request.goal) > _MAX_GOAL_CHARS):
            raise SubagentLifecycleError("goal must be a non-empty string of at most 16000 characters.")
        if request.context is not None and (not isinstance(request.context, str)
                                            or len(request.context) > _MAX_CONTEXT_CHARS):
            raise SubagentLifecycleError("context must be a string of at most 32000 characters.")
        if request.role not in {"leaf", "orchestrator"}:
            raise SubagentLifecycleError("role must be 'leaf' or 'orchestrator'.")
        if request.timeout_seconds is not None:
            raise SubagentLifecycleError(
                "Per-launch timeout is not supported; configure delegation timeout explicitly.")
        if request.working_directory is not None:
            raise SubagentLifecycleError(
                "working_directory is not supported because Hermes delegates use isolated task environments.")
        if request.blocked_tools:
            raise SubagentLifecycleError(
                "Per-tool blocking is not supported; use allowed_toolsets. Hermes always blocks unsafe child tools.")
        try:
            size = len(json.dumps(dict(request.metadata), sort_keys=True).encode())
        except (TypeError, ValueError) as exc:
            raise SubagentLifecycleError("metadata must be JSON-serializable.") from exc
        if size > _MAX_METADATA_BYTES:
            raise SubagentLifecycleError("metadata exceeds 8192 bytes.")


def _error_of(raw) -> Optional[str]:
    """The error of a dispatch's JSON answer (Hermes's ``{"error": …}``), else None."""
    try:
        data = json.loads(raw)
    except (TypeError, ValueError):
        return None
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return None
