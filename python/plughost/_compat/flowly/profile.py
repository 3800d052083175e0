"""``flowly.profile`` compat: a plugin's home is its own host's home."""

from __future__ import annotations

import os


#: The ``Path`` of each home returned so far: plugins ask on every hook
#: (disk-cleanup at every session end), and building a ``Path`` costs more
#: than the rest of the lookup. ``Path`` is immutable, so one is shared.
_HOME_PATHS: "dict[str, object]" = {}


def get_flowly_home():
    """Return the home of the plughost host that loaded the calling plugin, as a Path.

    Each host has its own home; a plugin (and the helpers and threads it
    calls or starts) sees its own host's.  Outside plugin code: the home of
    the host built last, else ``$PLUGHOST_HOME`` or ``~/.plughost``.
    """
    import _plughost_runtime

    home = (
        _plughost_runtime.caller_home()
        or _plughost_runtime.HOME
        or os.environ.get("PLUGHOST_HOME")
        or os.path.expanduser("~/.plughost")
    )
    path = _HOME_PATHS.get(home)
    if path is None:
        from pathlib import Path  # on first use: start-up stays cheap

        if len(_HOME_PATHS) > 64:  # homes come and go (tests): keep it small
            _HOME_PATHS.clear()
        path = _HOME_PATHS[home] = Path(home)
    return path


__all__ = ["get_flowly_home"]
