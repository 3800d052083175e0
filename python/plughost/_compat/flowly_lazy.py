"""The finder serving plughost's compat modules (module
``_plughost_flowly_lazy``): each runs when it is first imported, so a host
whose plugins import no ``flowly`` module (or no web provider) pays for none.

On ``sys.meta_path``; only the names in :data:`SOURCES` are served. When it
serves the compat ``flowly`` package it goes first, ahead of ``sys.path``
(where a stray ``flowly`` directory is not Flowly).
Each module's code comes from the runtime's bytecode cache (the one the
eagerly installed compat modules use), so it is compiled once per binary,
not on every start. The finder and loader follow the import protocol
without subclassing ``importlib.abc`` (whose import costs a millisecond at
start-up), and specs come from the import system's own module (what
``importlib.util.spec_from_loader`` is; importing ``importlib.util`` runs
``contextlib`` and its imports).
"""

from __future__ import annotations

import sys

import _frozen_importlib as _bootstrap

from _plughost_native import compiled

#: module name -> source
SOURCES: "dict[str, str]" = {}
#: the names in SOURCES that are packages
PACKAGES: "set[str]" = set()


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
        spec = _bootstrap.spec_from_loader(
            fullname, _Loader(source), origin=f"<plughost:{fullname}>", is_package=fullname in PACKAGES
        )
        # ``__file__`` is ``<plughost:name>``, as for the runtime's own modules.
        spec.has_location = True  # type: ignore[union-attr]
        return spec


def install(sources: "dict[str, str]", packages: "list[str] | None" = None, first: bool = False) -> None:
    """Register *sources* (*packages* among them) and put the finder on
    ``sys.meta_path`` once: first when *first*, else last."""
    SOURCES.update(sources)
    PACKAGES.update(packages or ())
    finder = next((f for f in sys.meta_path if isinstance(f, LazyCompatFinder)), None)
    if finder is None:
        finder = LazyCompatFinder()
        sys.meta_path.append(finder)
    if first and sys.meta_path[0] is not finder:
        sys.meta_path.remove(finder)
        sys.meta_path.insert(0, finder)
