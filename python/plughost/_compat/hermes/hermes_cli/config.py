"""``hermes_cli.config`` compat (plughost): Hermes's ``config.yaml``.

Served only when no real ``hermes_cli`` is importable.  ``load_config`` reads
``<hermes home>/config.yaml`` (parsed by plughost, so PyYAML is not needed);
a missing file is an empty config.  ``save_config`` of a whole document
raises, naming the file to edit; ``set_config_value(key, value, force=False)``
changes one dotted key, typed as Hermes types it, and rewrites the file (as
Hermes's does, comments are not kept), and
``save_env_value`` sets a variable in ``<hermes home>/.env`` and in this
process's environment.
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


def _yaml_scalar(value: Any) -> str:
    import json

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)  # a YAML double-quoted scalar


def _yaml_lines(value: Any, indent: int) -> list:
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out = []
        for k, v in value.items():
            key = _yaml_scalar(str(k))
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:")
                out.extend(_yaml_lines(v, indent + 1))
            else:
                out.append(f"{pad}{key}: {_yaml_lines(v, 0)[0].strip()}")
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = _yaml_lines(item, indent + 1)
                out.append(f"{pad}- {nested[0].strip()}")
                out.extend(nested[1:])
            else:
                out.append(f"{pad}- {_yaml_lines(item, 0)[0].strip()}")
        return out
    return [pad + _yaml_scalar(value)]


#: Undotted keys Hermes's ``set_config_value`` stores in ``.env`` (``_is_env_config_key``).
_ENV_KEYS = frozenset({
    "OPENROUTER_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "VOICE_TOOLS_OPENAI_KEY",
    "EXA_API_KEY", "PARALLEL_API_KEY", "FIRECRAWL_API_KEY", "FIRECRAWL_API_URL",
    "FIRECRAWL_GATEWAY_URL", "TOOL_GATEWAY_DOMAIN", "TOOL_GATEWAY_SCHEME", "TOOL_GATEWAY_USER_TOKEN",
    "BROWSERBASE_API_KEY", "BROWSERBASE_PROJECT_ID", "BROWSER_USE_API_KEY", "FAL_KEY",
    "TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "TERMINAL_SSH_HOST", "TERMINAL_SSH_USER",
    "TERMINAL_SSH_KEY", "SUDO_PASSWORD", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "GITHUB_TOKEN",
    "HONCHO_API_KEY",
})

#: Settings whose value is a string in Hermes's defaults: never coerced
#: (``approvals.mode: off`` stays the string ``off``). plughost does not
#: carry Hermes's whole ``DEFAULT_CONFIG``; every other string is coerced
#: as Hermes coerces a non-string setting.
_STRING_SETTINGS = frozenset({
    "approvals.mode", "model", "model.default", "model.provider", "model.base_url",
    "model.api_mode", "terminal.backend", "terminal.cwd", "memory.provider", "display.skin",
    "tts.provider", "stt.provider", "web.backend", "browser.backend", "timezone",
})


def _is_env_key(key: str) -> bool:
    if "." in key:
        return False
    name = key.upper()
    return (name in _ENV_KEYS or name.endswith(("_API_KEY", "_TOKEN", "_SECRET"))
            or name.startswith("TERMINAL_SSH"))


def _coerce(key: str, value: Any) -> Any:
    """A string as Hermes's ``set_config_value`` types it: booleans, null,
    integers, exact floats, and ``[``/``{`` as YAML/JSON."""
    import json
    import logging
    import math

    if not isinstance(value, str) or key in _STRING_SETTINGS:
        return value
    text = value.strip()
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "none", "~"):
        return None
    digits = text.replace("_", "").replace(" ", "")
    if digits.lstrip("+-").isdigit():
        return int(digits)
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None and math.isfinite(number) and repr(number) == text.lstrip("+"):
        return number
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except ValueError:
            pass
        import _plughost_hermes

        try:
            parsed = _plughost_hermes.parse_yaml(text, key)
        except ValueError:
            logging.getLogger("hermes_cli.config").warning(
                "%s: not valid YAML/JSON; storing as string", key)
            return value
        if isinstance(parsed, (list, dict)):
            return parsed
        logging.getLogger("hermes_cli.config").warning(
            "%s: looks like a list/mapping but parsed as %s; storing as string", key, type(parsed).__name__)
    return value


def set_config_value(key: str, value: Any, force: bool = False) -> None:
    """Set dotted ``key`` (``display.skin``) in ``config.yaml`` and write it back whole,
    as Hermes's ``set_config_value(key, value, force)``: a string value is typed
    (``"true"`` is true, ``"30"`` is 30, ``'["a"]'`` a list); an undotted
    credential-shaped key (``FOO_API_KEY``) goes to ``.env``; ``model`` alone
    sets ``model.default``; another single key naming a section is refused
    unless ``force=True``, which replaces the section."""
    import os

    key = str(key)
    if _is_env_key(key):
        save_env_value(key.upper(), "" if value is None else str(value))
        return
    parts = [p for p in key.split(".")]
    if not parts or any(not p for p in parts):
        raise ValueError(f"config key {key!r} has an empty segment")
    config = load_config()
    value = _coerce(key, value)
    if len(parts) == 1 and isinstance(config.get(key), dict) and not isinstance(value, dict):
        if key == "model":
            parts = ["model", "default"]
        elif not force:
            section = config[key]
            raise ValueError(
                f"Cannot set '{key}' to a scalar — '{key}' is a configuration section with "
                f"{len(section)} sub-key(s). Sub-keys: {', '.join(map(str, section))}. Use a dotted "
                f"path to set a specific leaf key, or force=True to replace the entire section")
    if parts[0] == "model" and len(parts) > 1 and isinstance(config.get("model"), str):
        config["model"] = {"default": config["model"]}
    node = config
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
    path = get_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(f".yaml.tmp.{os.getpid()}")
    scratch.write_text("\n".join(_yaml_lines(config, 0)) + "\n", encoding="utf-8")
    os.replace(scratch, path)


def read_raw_config() -> dict:
    """The user's ``config.yaml`` as written (plughost has no defaults to merge in)."""
    return load_config()


def get_env_path() -> Path:
    return get_hermes_home() / ".env"


def save_env_value(key: str, value: str) -> None:
    """``KEY=value`` in ``<hermes home>/.env`` (replacing an earlier line) and in ``os.environ``."""
    import os

    if not key or "=" in key or any(c.isspace() for c in key):
        raise ValueError(f"not an environment variable name: {key!r}")
    value = "" if value is None else str(value)
    path = get_env_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    kept = [l for l in lines if not l.split("=", 1)[0].strip().removeprefix("export ").strip() == key]
    kept.append(f"{key}={value}")
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".env.tmp.{os.getpid()}")
    scratch.write_text("\n".join(kept) + "\n", encoding="utf-8")
    os.chmod(scratch, 0o600)
    os.replace(scratch, path)
    os.environ[key] = value


def get_env_value(key: str):
    """``key`` from the process environment, else from ``<hermes home>/.env``
    (as Hermes's ``get_env_value``); ``None`` when neither has it."""
    import os

    if key in os.environ:
        return os.environ[key]
    try:
        lines = get_env_path().read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, OSError):
        return None
    value = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, raw = line.partition("=")
        if name.strip().removeprefix("export ").strip() == key:
            raw = raw.strip()
            if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
                raw = raw[1:-1]
            value = raw
    return value
