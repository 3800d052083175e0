"""Agent-specific tool registration: ``should_register_tools_for_agent``,
``select_tools_for_agent``, ``write_tool_names``, ``clamp_target_agents``,
``target_agents_description`` (and, with pydantic, the clamped types).

Kind tokens are ``main``, ``subagent`` and ``all``; roles come from a closed
registry. ``target_agents`` fails open (an unusable value admits every agent,
with a warning); ``deny_agents`` fails closed (an unusable value denies every
agent, with a warning). A plughost ``delegate`` sub-agent is kind
``subagent`` with no role.
"""

from __future__ import annotations

import logging

log = logging.getLogger("plughost.codumentor")

KINDS = ("main", "subagent", "all")
ROLES = (
    "explore",
    "agentic_developer",
    "agentic_memory_store",
    "web_search",
    "web_retrieve",
    "goal",
    "context_summarization",
)
_warned: "set[str]" = set()


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        log.warning(text)


def _tokens(value):
    """The recognised tokens of ``value`` (a token or an iterable of them), or None if unusable."""
    if isinstance(value, str):
        items = [value]
    else:
        try:
            items = list(value)
        except TypeError:
            return None
    good = [t for t in items if isinstance(t, str) and (t in KINDS or t in ROLES)]
    return good or None


def _identity(agent):
    kind = getattr(agent, "kind", None)
    behavior = getattr(agent, "behavior_config", None)
    role = getattr(behavior, "model_role", None) if behavior is not None else None
    if kind not in ("main", "subagent"):
        kind = None
    if role not in ROLES:
        role = None
    return kind, role


def _names(agent, tokens) -> "bool | None":
    """Whether ``tokens`` name ``agent``; None when the agent cannot be identified."""
    kind, role = _identity(agent)
    if "all" in tokens:
        return True
    if kind is None and role is None:
        return None
    return (kind is not None and kind in tokens) or (role is not None and role in tokens)


def should_register_tools_for_agent(agent, target_agents="all", deny_agents=None) -> bool:
    tokens = _tokens(target_agents)
    if tokens is None:
        _warn_once(f"target_agents {target_agents!r} is not usable; registering with every agent")
        admitted = True
    else:
        named = _names(agent, tokens)
        if named is None:
            _warn_once("cannot identify the agent; target_agents admits it")
            admitted = True
        else:
            admitted = named
    if not admitted:
        return False
    if deny_agents is None or deny_agents == "" or (not isinstance(deny_agents, str) and _empty(deny_agents)):
        return True
    deny = _tokens(deny_agents)
    if deny is None:
        _warn_once(f"deny_agents {deny_agents!r} is not usable; withholding the tools from every agent")
        return False
    named = _names(agent, deny)
    if named is None:
        _warn_once("cannot identify the agent; deny_agents withholds the tools")
        return False
    return not named


def _empty(value) -> bool:
    try:
        return len(value) == 0
    except TypeError:
        return False


def _is_write(tool) -> bool:
    if isinstance(tool, dict):
        return bool(tool.get("is_write", False))
    return bool(getattr(tool, "is_write", False))


def write_tool_names(tools) -> "set[str]":
    names = set()
    for tool in tools:
        if _is_write(tool):
            names.add(tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None))
    names.discard(None)
    return names


def select_tools_for_agent(
    agent, tools, *, target_agents="all", write_target_agents=None, deny_agents=None, write_deny_agents=None
):
    tools = list(tools)
    if not should_register_tools_for_agent(agent, target_agents, deny_agents):
        return []
    if write_target_agents is None and write_deny_agents is None:
        return tools
    if not any(_is_write(t) for t in tools):
        _warn_once("a write tier is set but no tool declares is_write; it can never remove anything")
        return tools
    writes_ok = should_register_tools_for_agent(
        agent, "all" if write_target_agents is None else write_target_agents, write_deny_agents
    )
    return tools if writes_ok else [t for t in tools if not _is_write(t)]


def clamp_target_agents(value, fallback):
    """``value`` with unrecognised tokens clamped to ``fallback``; shape in, shape out."""
    if isinstance(value, str):
        return value if _tokens(value) else fallback
    try:
        items = list(value)
    except TypeError:
        return fallback
    good = [t for t in items if isinstance(t, str) and (t in KINDS or t in ROLES)]
    return good if good else [fallback]


def target_agents_description(noun="tools", fallback="all") -> str:
    return (
        f"Which agents get these {noun}: a token or a list of them — kinds "
        f"{', '.join(KINDS)}; roles {', '.join(ROLES)}. An unrecognised value becomes {fallback!r}."
    )


try:  # pydantic is optional: the clamped types exist only where it is importable
    from typing import Any

    from pydantic import BeforeValidator
    from typing_extensions import Annotated

    TargetAgentsClampedToAll = Annotated[Any, BeforeValidator(lambda v: clamp_target_agents(v, "all"))]
    TargetAgentsClampedToMain = Annotated[Any, BeforeValidator(lambda v: clamp_target_agents(v, "main"))]
    TargetAgentsSetting = Any
except ImportError:  # pragma: no cover - depends on the environment
    pass
