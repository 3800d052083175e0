"""``flowly.plugins.manifest`` compat: the manifest as plugins see it.

``ctx.manifest`` is a :class:`PluginManifest` with Flowly's attribute names;
plughost parses and validates the file itself (in Rust) and builds this
record with keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class PluginManifest:
    """A plugin's parsed ``plugin.yaml`` / ``plugin.yml`` / ``plugin.json``."""

    name: str
    version: str = ""
    description: str = ""
    author: str = ""
    kind: str = "standalone"
    manifest_version: int = 1
    #: Variable names, or ``{"name", "description"}`` mappings.
    requires_env: list[str | dict[str, Any]] = field(default_factory=list)
    provides_tools: list[str] = field(default_factory=list)
    provides_hooks: list[str] = field(default_factory=list)
    provides_web_providers: list[str] = field(default_factory=list)
    #: ``bundled``, ``user`` or ``project``.
    source: str = ""
    #: The plugin's directory.
    path: Path | None = None
    #: The plugin's key (its name).
    key: str = ""


__all__ = ["PluginManifest"]
