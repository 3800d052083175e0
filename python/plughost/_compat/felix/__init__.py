"""plughost's Felix dialect, Python half: the fallback finder for the
``felix`` / ``felix_ai`` modules plugins import, and the loader and hook
adapters the Rust dialect calls.

The finder is appended to the end of ``sys.meta_path``: consulted only after
every other finder, so a real Felix installation always wins and these
modules never shadow it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: module name -> (source, is a package)
SOURCES: "dict[str, tuple[str, bool]]" = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, source: str) -> None:
        self._source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        code = compile(self._source, f"<plughost:{module.__name__}>", "exec")
        exec(code, module.__dict__)


class FelixCompatFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`SOURCES` for names no other finder found."""

    def find_spec(self, fullname, path=None, target=None):
        entry = SOURCES.get(fullname)
        if entry is None:
            return None
        source, is_package = entry
        return importlib.util.spec_from_loader(
            fullname, _Loader(source), origin=f"<plughost:{fullname}>", is_package=is_package
        )


def install(sources: "dict[str, tuple[str, bool]]") -> None:
    """Register the compat sources and put the finder last on ``sys.meta_path`` (once)."""
    SOURCES.update(sources)
    if not any(isinstance(f, FelixCompatFinder) for f in sys.meta_path):
        sys.meta_path.append(FelixCompatFinder())


# The parts, one concern each: modules `_plughost_felix_<part>` the Rust
# dialect creates from registry.py, server.py, values.py and loader.py
# before this facade runs; the Rust side calls them through this module.
from _plughost_felix_registry import HOOK_KINDS, PluginRegistry  # noqa: E402,F401
from _plughost_felix_server import (  # noqa: E402,F401
    _cron_tasks,
    _routes,
    audit_row,
    authenticate,
    mount_routes,
    plugin_app,
    rate_limit_key,
    record_usage,
)
from _plughost_felix_values import (  # noqa: E402,F401
    STOP_REASONS,
    App,
    Mistake,
    args_for,
    call_tool,
    error_text,
    from_message,
    interpret,
    to_messages,
    tool_text,
)
from _plughost_felix_loader import load  # noqa: E402,F401
from _plughost_felix_models import chat as model_chat  # noqa: E402,F401
