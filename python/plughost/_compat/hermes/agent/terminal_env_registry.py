"""``agent.terminal_env_registry`` (plughost): which terminal backends the
plugins of the calling host registered (see ``agent.terminal_env_provider``).
Hermes's registry is process-wide; plughost keeps one per host, so these
functions answer for the host whose plugin is loading or running now
(none outside one)."""

from __future__ import annotations

from typing import List, Optional

#: Names owned by Hermes's in-tree backends: never registrable by plugins.
BUILTIN_BACKEND_NAMES = frozenset({
    "local", "docker", "singularity", "modal", "managed_modal", "daytona", "vercel_sandbox", "ssh",
})


def _bus():
    import _plughost_hermes_ctx

    return _plughost_hermes_ctx.calling_bus()


def register_provider(provider) -> None:
    """Register ``provider`` on the calling host (as the context's registrar)."""
    bus = _bus()
    if bus is None:
        raise RuntimeError("register_provider: no plughost host is loading or running a plugin now")
    bus.add_terminal_provider("<registry>", provider)


def get_provider(name: str):
    bus = _bus()
    return None if bus is None else bus.terminal_providers().get(str(name).strip().lower())


def list_providers() -> list:
    bus = _bus()
    return [] if bus is None else list(bus.terminal_providers().values())


def plugin_backend_names(*, scope: Optional[str] = None) -> List[str]:
    bus = _bus()
    return [] if bus is None else sorted(bus.terminal_providers())


def provider_flag(name: str, attr: str, default=False):
    provider = get_provider(name)
    if provider is None:
        return default
    try:
        return getattr(provider, attr, default)
    except Exception:
        return default


def plugin_strip_env_keys() -> frozenset:
    keys: set = set()
    for provider in list_providers():
        try:
            keys.update(provider.strip_env_keys)
        except Exception:
            pass
    return frozenset(keys)
