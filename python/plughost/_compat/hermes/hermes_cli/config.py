"""``hermes_cli.config`` compat (plughost): Hermes's ``config.yaml``, read-only.

Served only when no real ``hermes_cli`` is importable.  ``load_config`` reads
``<hermes home>/config.yaml`` (parsed by plughost, so PyYAML is not needed);
a missing file is an empty config.  plughost never writes Hermes's config:
``save_config`` raises, naming the file to edit.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hermes_constants import get_hermes_home


def get_config_path() -> Path:
    return get_hermes_home() / "config.yaml"


def load_config() -> dict:
    """The parsed ``config.yaml`` (``{}`` when it does not exist)."""
    import _plughost_hermes

    path = get_config_path()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return {}
    data = _plughost_hermes.parse_yaml(text, str(path))
    return data if isinstance(data, dict) else {}


def load_config_readonly() -> dict:
    return copy.deepcopy(load_config())


def cfg_get(config: Any, *keys: str, default: Any = None) -> Any:
    """``config[k1][k2]…``, else ``default`` where a level is missing or not a mapping."""
    node = config
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def save_config(config: dict) -> None:
    raise PermissionError(
        f"plughost does not write Hermes's configuration; edit {get_config_path()} instead"
    )
