"""``_plughost_hermes`` in a process a Hermes plugin started (plughost
exports the compat modules' directory on ``PYTHONPATH``): the compat
modules import it, but no plughost host runs here, so only what needs no
host works (``hermes_constants``, reading ``config.yaml`` with PyYAML).
"""

import json
import os

HERMES_HOME = os.environ.get("HERMES_HOME", "")


def parse_yaml(text, path):
    try:
        import yaml
    except ImportError:
        raise ValueError(
            f"reading {path} in a process a plugin started needs PyYAML "
            "(plughost's YAML parser lives in the plughost process)"
        ) from None
    data = yaml.safe_load(text)
    return {} if data is None else data


def current_context():
    return None


def dispatch_tool(name, args, task_id):
    return json.dumps({"error": f"dispatch_tool('{name}'): no plughost host runs in this process"})
def calling_session():
    return None
def mcp_servers():
    return None
