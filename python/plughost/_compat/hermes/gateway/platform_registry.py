"""``gateway.platform_registry`` compat (plughost): the registry of platform
adapters plugins register with ``ctx.register_platform`` (Hermes's
``plugin_runtime/platform_registry.py``), read by adapters themselves
(``platform_registry.get("irc").max_message_length``) and by plughost's
gateway, which makes each enabled platform's adapter with its factory.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

logger = logging.getLogger(__name__)


@dataclass
class PlatformEntry:
    """Metadata and factory for a single platform adapter (Hermes's fields)."""

    name: str
    label: str
    adapter_factory: Callable[[Any], Any]
    check_fn: Callable[[], bool]
    validate_config: Optional[Callable[[Any], bool]] = None
    ensure_deps_fn: Optional[Callable[[], bool]] = None
    is_connected: Optional[Callable[[Any], bool]] = None
    required_env: list = field(default_factory=list)
    install_hint: str = ""
    setup_fn: Optional[Callable[[], None]] = None
    source: str = "plugin"
    plugin_name: str = ""
    allowed_users_env: str = ""
    allow_all_env: str = ""
    max_message_length: int = 0
    pii_safe: bool = False
    emoji: str = "🔌"
    allow_update_command: bool = True
    platform_hint: str = ""
    env_enablement_fn: Optional[Callable[[], Optional[dict]]] = None
    apply_yaml_config_fn: Optional[Callable[[dict, dict], Optional[dict]]] = None
    cron_deliver_env_var: str = ""
    parse_target_ref_fn: Optional[Callable[[str], Any]] = None
    validate_target_ref_fn: Optional[Callable[[str], Any]] = None
    send_message_handler: Optional[Callable[..., Any]] = None
    standalone_sender_fn: Optional[Callable[..., Awaitable[dict]]] = None


class PlatformRegistry:
    """Registered platforms by name (last writer wins, as in Hermes)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._entries: "dict[str, PlatformEntry]" = {}

    def register(self, entry: PlatformEntry, *, scope: Optional[str] = None) -> None:
        with self._lock:
            if entry.name in self._entries:
                logger.info("platform '%s' registered again; the later registration wins", entry.name)
            self._entries[entry.name] = entry

    def unregister(self, name: str) -> Optional[PlatformEntry]:
        with self._lock:
            return self._entries.pop(name, None)

    def get(self, name: str) -> Optional[PlatformEntry]:
        with self._lock:
            return self._entries.get(name)

    def is_registered(self, name: str) -> bool:
        return self.get(name) is not None

    def all_entries(self) -> "list[PlatformEntry]":
        with self._lock:
            return list(self._entries.values())

    def plugin_entries(self) -> "list[PlatformEntry]":
        return [e for e in self.all_entries() if e.source == "plugin"]

    def create_adapter(self, name: str, config: Any):
        entry = self.get(name)
        if entry is None:
            return None
        try:
            if not entry.check_fn():
                logger.warning("platform '%s': requirements not met. %s", name, entry.install_hint)
                return None
        except Exception as e:
            logger.warning("platform '%s': check_fn raised %s", name, e)
            return None
        if entry.validate_config is not None and not entry.validate_config(config):
            logger.warning("platform '%s': configuration rejected by validate_config", name)
            return None
        return entry.adapter_factory(config)


platform_registry = PlatformRegistry()

_ENTRY_FIELDS = set(PlatformEntry.__dataclass_fields__)


def _plughost_register(plugin_name, args, *rest, **kwargs):
    """``ctx.register_platform(name, label, adapter_factory, check_fn,
    validate_config=None, required_env=None, install_hint="", **entry_kwargs)``
    as Hermes's context: the entry is built, registered and returned."""
    names = ("name", "label", "adapter_factory", "check_fn", "validate_config", "required_env", "install_hint")
    values = dict(zip(names, tuple(args) + tuple(rest)))
    for k, v in kwargs.items():
        if k in values:
            raise TypeError(f"register_platform() got multiple values for argument '{k}'")
        values[k] = v
    missing = [n for n in names[:4] if n not in values]
    if missing:
        raise TypeError(f"register_platform() missing required argument(s): {', '.join(missing)}")
    unknown = sorted(k for k in values if k not in _ENTRY_FIELDS)
    for k in unknown:
        logger.warning("register_platform: unknown entry field '%s' ignored", k)
        values.pop(k)
    if not callable(values["adapter_factory"]):
        raise TypeError("register_platform: adapter_factory must be callable (PlatformConfig -> adapter)")
    values["required_env"] = list(values.get("required_env") or [])
    values["install_hint"] = values.get("install_hint") or ""
    values.setdefault("source", "plugin")
    values.setdefault("plugin_name", plugin_name)
    entry = PlatformEntry(**values)
    platform_registry.register(entry)
    return entry
