"""``Tool``: the base class of a Codumentor tool (override ``execute``)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from codumentor.agent.types import ToolResult


class Tool(ABC):
    """Subclass it and implement :meth:`get_parameters_schema` and :meth:`execute`."""

    #: Declares the tool a write (``select_tools_for_agent``'s second tier).
    is_write = False
    #: Codumentor's per-call approval request; plughost has no permission prompts.
    permission_request = None

    def __init__(self, name, description="", **kwargs):
        self.name = name
        self.description = description
        for key, value in kwargs.items():
            setattr(self, key, value)

    @abstractmethod
    def get_parameters_schema(self) -> dict:
        """The JSON Schema of the arguments."""

    @abstractmethod
    async def execute(self, arguments: dict) -> ToolResult:
        """Run the tool; ``arguments`` carries ``tool_call_id`` too."""

    def get_function_definition(self) -> dict:
        return {"name": self.name, "description": self.description, "parameters": self.get_parameters_schema()}

    async def call(self, arguments: dict) -> ToolResult:
        """The framework wrapper: runs :meth:`execute` (override that, never this)."""
        return await self.execute(arguments)
