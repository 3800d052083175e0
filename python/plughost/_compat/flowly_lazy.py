"""The finder serving plughost's compat modules that are compiled on first
import rather than when the ``flowly`` package is installed (module
``_plughost_flowly_lazy``): the web providers and tools, which most hosts
never import, cost nothing until a plugin or a web tool does.

Appended to ``sys.meta_path``; only the names in :data:`SOURCES` are served.
Each module's code comes from the runtime's bytecode cache (the one the
eagerly installed compat modules use), so it is compiled once per binary,
not on every start. The finder and loader follow the import protocol
without subclassing ``importlib.abc`` (whose import costs a millisecond at
start-up).
"""

from __future__ import annotations

import importlib.util
import sys

from _plughost_native import compiled

#: module name -> source
SOURCES: "dict[str, str]" = {}


class _Loader:
    def __init__(self, source: str) -> None:
        self._source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        exec(compiled(module.__name__, self._source), module.__dict__)


class LazyCompatFinder:
    """Serves :data:`SOURCES`."""

    def find_spec(self, fullname, path=None, target=None):
        source = SOURCES.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader(source), origin=f"<plughost:{fullname}>")


def install(sources: "dict[str, str]") -> None:
    """Register *sources* and put the finder on ``sys.meta_path`` (once)."""
    SOURCES.update(sources)
    if not any(isinstance(f, LazyCompatFinder) for f in sys.meta_path):
        sys.meta_path.append(LazyCompatFinder())
