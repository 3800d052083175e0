"""The minimal pure-Python plugin loader plughost's cold start is compared with.

Run: python min_loader.py HOME → lists the plugins under HOME/plugins that
HOME/config.json enables, with their tools and hooks, as `plughost plugins
list` does. It does what a user would write instead of plughost, and no
more: each enabled plugin directory imported as its own package, its
`register(ctx)` called with a context that keeps tools and hooks, one line
printed per plugin. No schema validation, no manifest checks, no dialects.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys


class Context:
    def __init__(self) -> None:
        self.tools: dict = {}
        self.hooks: list = []

    def register_tool(self, name, schema, handler, **_):
        self.tools[name] = (schema, handler)

    def register_hook(self, event, callback, **_):
        self.hooks.append((event, callback))


def load(directory: str, slug: str) -> Context:
    name = f"_min_plugins.{slug}"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(directory, "__init__.py"), submodule_search_locations=[directory]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    ctx = Context()
    module.register(ctx)
    return ctx


def main() -> None:
    home = sys.argv[1]
    try:
        with open(os.path.join(home, "config.json")) as f:
            enabled = set(json.load(f).get("plugins", {}).get("enabled", []))
    except FileNotFoundError:
        enabled = set()
    root = os.path.join(home, "plugins")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    out = []
    for slug in names:
        directory = os.path.join(root, slug)
        if slug not in enabled or not os.path.exists(os.path.join(directory, "plugin.yaml")):
            continue
        ctx = load(directory, slug)
        out.append(f"{slug}  tools: {', '.join(ctx.tools)}  hooks: {len(ctx.hooks)}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
