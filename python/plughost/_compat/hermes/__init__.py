"""plughost's fallback finder for the Hermes core modules plugins import.

Appended to the end of ``sys.meta_path``: consulted only after every other
finder, so a real Hermes installation (a module of the same name anywhere on
``sys.path``) always wins and these modules never shadow it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

#: The Hermes home plugins see (set by the dialect before any plugin loads).
HERMES_HOME = ""

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


class HermesCompatFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`SOURCES` for names no other finder found."""

    def find_spec(self, fullname, path=None, target=None):
        entry = SOURCES.get(fullname)
        if entry is None:
            return None
        source, is_package = entry
        return importlib.util.spec_from_loader(
            fullname, _Loader(source), origin=f"<plughost:{fullname}>", is_package=is_package
        )


def install(sources: "dict[str, tuple[str, bool]]", hermes_home: str) -> None:
    """Register the compat sources and put the finder last on ``sys.meta_path`` (once)."""
    global HERMES_HOME
    SOURCES.update(sources)
    HERMES_HOME = hermes_home
    if not any(isinstance(f, HermesCompatFinder) for f in sys.meta_path):
        sys.meta_path.append(HermesCompatFinder())
