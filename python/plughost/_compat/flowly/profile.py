"""``flowly.profile`` compat: the active home is plughost's home."""

from __future__ import annotations

import os


def get_flowly_home():
    """Return the plughost home (``$PLUGHOST_HOME`` or ``~/.plughost``) as a Path."""
    from pathlib import Path

    import _plughost_runtime

    home = _plughost_runtime.HOME or os.environ.get("PLUGHOST_HOME") or os.path.expanduser("~/.plughost")
    return Path(home)


__all__ = ["get_flowly_home"]
