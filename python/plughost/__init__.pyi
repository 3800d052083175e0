from os import PathLike
from typing import Any, Awaitable, Callable

JSON = Any

class PlughostError(Exception): ...
class ConfigError(PlughostError): ...
class CommandNotFound(PlughostError): ...
class SkillNotFound(PlughostError): ...
class ModelError(PlughostError): ...

class _Registers:
    """The registration surface of Flowly's PluginContext (stub-only base)."""

    def register_tool(
        self,
        name: str,
        schema: dict[str, JSON] | None = ...,
        handler: Callable[..., Any] | None = ...,
        *,
        check_fn: Callable[[], bool] | None = ...,
        description: str = ...,
    ) -> None: ...
    def register_hook(self, event_name: str, callback: Callable[[Any], Any]) -> None: ...
    def register_command(
        self, name: str, handler: Callable[[str], str | None | Awaitable[str | None]], description: str = ..., args_hint: str = ...
    ) -> None: ...
    def register_skill(self, name: str, path: str | PathLike[str], description: str = ...) -> None: ...

class PluginContext(_Registers):
    @property
    def name(self) -> str: ...
    @property
    def plugin_dir(self) -> str: ...

class Host(_Registers):
    def __init__(
        self,
        home: str | PathLike[str] | None = ...,
        project_dir: str | PathLike[str] | None = ...,
        enable: list[str] | None = ...,
        disable: list[str] | None = ...,
        *,
        builtin_tools: bool = ...,
        workspace: str | PathLike[str] | None = ...,
    ) -> None: ...
    @property
    def home(self) -> str: ...
    @property
    def context(self) -> PluginContext: ...
    def plugins(self) -> list[dict[str, JSON]]: ...
    def tools(self) -> list[dict[str, JSON]]: ...
    def call_tool(self, name: str, args: dict[str, JSON] | None = ..., session_id: str = ...) -> str: ...
    def acall_tool(self, name: str, args: dict[str, JSON] | None = ..., session_id: str = ...) -> Awaitable[str]: ...
    def run_command(self, line: str) -> str | None: ...
    def skill(self, name: str) -> str: ...

class Agent:
    def __init__(
        self,
        host: Host,
        model: str = ...,
        *,
        script: str | PathLike[str] | None = ...,
        base_url: str | None = ...,
        system_prompt: str | None = ...,
        max_iterations: int = ...,
        tool_timeout: float = ...,
    ) -> None: ...
    def send(self, message: str, session_id: str = ...) -> Awaitable[str]: ...
    def shutdown(self) -> Awaitable[None]: ...

__all__ = [
    "Agent",
    "CommandNotFound",
    "ConfigError",
    "Host",
    "ModelError",
    "PlughostError",
    "PluginContext",
    "SkillNotFound",
]
