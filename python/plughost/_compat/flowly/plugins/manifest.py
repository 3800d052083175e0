"""``flowly.plugins.manifest`` compat: the manifest as plugins see it.

``ctx.manifest`` is a :class:`PluginManifest` with Flowly's attribute names;
plughost parses and validates the file itself (in Rust) and builds this
record with keyword arguments.

The class is made on first use (``dataclasses`` costs a start-up that reads
no manifest a few milliseconds): ``from flowly.plugins.manifest import
PluginManifest`` and ``ctx.manifest`` build it once; it is the same
dataclass as before, named ``flowly.plugins.manifest.PluginManifest``.
"""

from __future__ import annotations

from pathlib import Path  # noqa: F401 - the annotations resolve here (typing.get_type_hints)
from typing import Any

__all__ = ["PluginManifest"]


def _build() -> type:
    from dataclasses import dataclass, field

    globals().update(dataclass=dataclass, field=field)  # as the module had them

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

    # Named as a module-level class is (repr, pickling, documentation).
    PluginManifest.__qualname__ = "PluginManifest"
    return dataclass(PluginManifest)


def __getattr__(name: str):
    if name == "PluginManifest":
        cls = globals().get("_PluginManifest")
        if cls is None:
            cls = _build()
            globals()["_PluginManifest"] = cls
            globals()["PluginManifest"] = cls
        return cls
    raise AttributeError(f"module 'flowly.plugins.manifest' has no attribute {name!r}")
