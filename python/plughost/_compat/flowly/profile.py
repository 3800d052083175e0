"""``flowly.profile`` compat: a plugin's home is its own host's home."""

from __future__ import annotations

import os


def get_flowly_home():
    """Return the home of the plughost host that loaded the calling plugin, as a Path.

    Each host has its own home; a plugin (and the helpers and threads it
    calls or starts) sees its own host's.  Outside plugin code: the home of
    the host built last, else ``$PLUGHOST_HOME`` or ``~/.plughost``.
    """
    from pathlib import Path

    import _plughost_runtime

    home = (
        _plughost_runtime.caller_home()
        or _plughost_runtime.HOME
        or os.environ.get("PLUGHOST_HOME")
        or os.path.expanduser("~/.plughost")
    )
    return Path(home)


__all__ = ["get_flowly_home"]
