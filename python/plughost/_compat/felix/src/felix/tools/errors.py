"""Tool error codes, as ``felix.tools.errors`` defines them."""

from __future__ import annotations

from enum import Enum

from felix.tools.types import ToolOutputDict


class ToolErrorCode(str, Enum):
    INVALID_ARGUMENTS = "invalid_arguments"
    NOT_FOUND = "not_found"
    PERMISSION_DENIED = "permission_denied"
    TIMEOUT = "timeout"
    USER_ABORTED = "user_aborted"
    INTERNAL = "internal"
    BLOCKED = "blocked"


class ToolError(Exception):
    def __init__(self, message: str = "", code: "ToolErrorCode | str" = ToolErrorCode.INTERNAL) -> None:
        super().__init__(message)
        self.code = code


def _value(code) -> str:
    return getattr(code, "value", code)


def tool_error_output(code: "ToolErrorCode | str", content: str) -> ToolOutputDict:
    return ToolOutputDict(content=content, metadata={"is_error": True, "error_code": _value(code)})


def infer_error_code(exc: BaseException) -> str:
    if isinstance(exc, ToolError):
        return _value(exc.code)
    name = type(exc).__name__
    if name in ("TimeoutError", "CancelledError", "AbortError"):
        return "user_aborted"
    message = str(exc).lower()
    if "timeout" in name.lower() or "timeout" in message:
        return "timeout"
    if "permission" in message or "forbidden" in message:
        return "permission_denied"
    return "internal"


__all__ = ["ToolError", "ToolErrorCode", "tool_error_output", "infer_error_code"]
