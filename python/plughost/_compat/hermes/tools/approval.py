"""``tools.approval`` compat (plughost): Hermes's dangerous-command check.

plughost has no human approval gate, so a command Hermes would stop for
approval is refused, and the answer says how to allow such commands
(``approvals.mode: off`` in the Hermes ``config.yaml``); a command that
matches no dangerous pattern is approved. Never a silent pass.
"""

from __future__ import annotations

import re

#: (pattern, description): the kinds of command Hermes asks about.
DANGEROUS_PATTERNS = [
    (r"\brm\s+(-[a-zA-Z]*[rf][a-zA-Z]*\s+)+", "recursive or forced delete"),
    (r"\bmkfs(\.\w+)?\b", "format a filesystem"),
    (r"\bdd\s+.*\bof=", "raw disk write"),
    (r">\s*/dev/(sd|nvme|hd|disk)", "write to a block device"),
    (r"\bchmod\s+(-R\s+)?0?777\b", "world-writable permissions"),
    (r"\b(curl|wget)\b[^|]*\|\s*(ba|z)?sh\b", "pipe a download into a shell"),
    (r"\b(shutdown|reboot|halt|poweroff)\b", "stop the machine"),
    (r":\(\)\s*\{\s*:\|:&\s*\};:", "fork bomb"),
    (r"\bgit\s+push\s+.*--force\b", "force push"),
    (r"\bsudo\b", "run as root"),
]


def _get_approval_mode() -> str:
    """``approvals.mode`` of the Hermes ``config.yaml`` (``manual`` when unset)."""
    from hermes_cli.config import cfg_get, load_config

    mode = cfg_get(load_config(), "approvals", "mode", default="manual")
    if mode is False:  # a YAML 1.1 reader reads an unquoted ``off`` as false
        return "off"
    return str(mode).strip().lower() if mode is not None else "manual"


def detect_dangerous_command(command: str):
    """``(True, pattern_key, description)`` for a dangerous command, else ``(False, None, None)``."""
    for pattern, description in DANGEROUS_PATTERNS:
        if re.search(pattern, command or ""):
            return True, pattern, description
    return False, None, None


def check_dangerous_command(command: str, env_type: str = "local", approval_callback=None, **_kwargs) -> dict:
    """Hermes's answer shape: ``{"approved": bool, "message", "status", "description", ...}``."""
    dangerous, pattern_key, description = detect_dangerous_command(command)
    if not dangerous or _get_approval_mode() == "off":
        return {"approved": True, "message": None}
    return {
        "approved": False,
        "status": "denied",
        "pattern_key": pattern_key,
        "description": description,
        "message": (
            f"BLOCKED: {description}. plughost has no interactive approval, so commands "
            f"Hermes would ask about are refused. To allow them, set approvals.mode: off in "
            f"the Hermes config.yaml (or guard them with a pre_tool_call hook instead)."
        ),
    }


def check_all_command_guards(command: str, env_type: str = "local", approval_callback=None, **kwargs) -> dict:
    return check_dangerous_command(command, env_type, approval_callback, **kwargs)


def request_tool_approval(tool_name: str, reason: str, rule_key=None, **_kwargs) -> dict:
    """Hermes asks a human whether ``tool_name`` may do what ``reason`` says.
    plughost has no one to ask: the request is refused, saying how to allow it,
    unless ``approvals.mode`` is ``off`` in the Hermes ``config.yaml``."""
    if _get_approval_mode() == "off":
        return {"approved": True, "message": None, "rule_key": rule_key}
    return {
        "approved": False,
        "status": "denied",
        "rule_key": rule_key,
        "description": reason,
        "message": (
            f"BLOCKED: {tool_name} needs approval ({reason}). plughost has no interactive "
            "approval, so the request is refused. To allow it, set approvals.mode: off in "
            "the Hermes config.yaml."
        ),
    }
