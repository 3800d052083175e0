"""``plugin_runtime.manifest`` compat (plughost): Hermes's ``PluginManifest``
and its registry key."""

from __future__ import annotations

from hermes_cli.plugins import PluginManifest  # noqa: F401  (re-exported)


def manifest_key(manifest) -> str:
    """The plugin's registry key: its ``key``, else its name."""
    return getattr(manifest, "key", "") or getattr(manifest, "name", "")
