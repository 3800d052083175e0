"""``agent.terminal_env_provider`` (plughost): the base class of a
pluggable terminal backend (``ctx.register_terminal_environment_provider``).

As in Hermes, the backend is used when ``terminal.backend`` of the Hermes
``config.yaml`` (or ``TERMINAL_ENV``) names it: plughost's ``exec`` tool
(Hermes's ``terminal``) then runs each command through
``provider.create_environment(cwd=…, timeout=…, task_id=…)``'s
``execute(command, cwd=…, timeout=…)`` (``{"output", "returncode"}``)
instead of a local shell. ``plugins doctor`` says whether it is active.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, List, Optional, Tuple


class ProviderBase(abc.ABC):
    """``agent.provider_base.ProviderBase``'s naming part."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The backend's registry name (``terminal.backend``)."""

    @property
    def display_name(self) -> str:
        return self.name


class TerminalEnvironmentProvider(ProviderBase):
    """A pluggable terminal execution backend."""

    is_remote: bool = True
    is_container: bool = True
    session_isolated_when_nonpersistent: bool = False

    @property
    def description(self) -> str:
        return f"Run commands in a {self.display_name} environment."

    @property
    def skip_container_guards(self) -> bool:
        return self.is_container

    @property
    def cache_path_base(self) -> Optional[str]:
        return None

    @property
    def strip_env_keys(self) -> frozenset:
        return frozenset()

    @property
    def env_description(self) -> str:
        return f"a {self.display_name} environment (likely Linux)"

    @abc.abstractmethod
    def is_available(self) -> bool:
        """True when this backend can service commands (cheap, no network)."""

    def check_requirements(self, config: Dict[str, Any]) -> bool:
        return self.is_available()

    def probe(self) -> Tuple[str, str]:
        return ("ready", "") if self.is_available() else ("needs_setup", f"{self.display_name} is not configured.")

    def probe_with_config(self, config) -> Tuple[str, str]:
        return self.probe()

    def setup_instructions(self) -> List[str]:
        return []

    def post_setup(self) -> None:
        """Hermes's interactive setup step (plughost has no setup wizard)."""

    def doctor_checks(self) -> List[Tuple[bool, str, str]]:
        try:
            ok = bool(self.is_available())
        except Exception:
            ok = False
        return [(ok, f"{self.display_name} backend", "(configured)" if ok else "(not configured — see setup instructions)")]

    def get_config_schema(self) -> Dict[str, Dict[str, Any]]:
        return {}

    def resolve_config(self, config) -> Dict[str, Any]:
        return dict(config)

    @abc.abstractmethod
    def create_environment(self, *, cwd: str, timeout: int, task_id: str = "default",
                           image: Optional[str] = None, container_config: Optional[Dict[str, Any]] = None,
                           **kwargs: Any):
        """An execution environment (``execute()``, ``cleanup()``)."""


def run_command(env, args: dict, base: str) -> str:
    """``exec``'s call (``command``, ``cwd``, ``timeout``) through ``env``, answered as
    plughost's ``exec`` answers: the output, then ``[exit code: N]`` when it failed."""
    import os

    cwd = args.get("cwd")
    cwd = os.path.join(base, cwd) if cwd else base
    timeout = args.get("timeout")
    result = env.execute(str(args.get("command", "")), cwd=cwd,
                         timeout=int(timeout) if isinstance(timeout, (int, float)) else None)
    if not isinstance(result, dict):
        return str(result)
    text = str(result.get("output", "") or "")
    code = result.get("returncode", 0)
    if code not in (0, None):
        text += f"\n[exit code: {code}]"
    return text
