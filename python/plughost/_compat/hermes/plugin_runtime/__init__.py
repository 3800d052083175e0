"""``plugin_runtime`` compat (plughost): Hermes's plugin runtime package
(``plugin_runtime.context``, ``.dispatch``, ``.manifest``, ``.manager``),
where Hermes's own code now imports ``PluginContext``, ``VALID_HOOKS`` and
the manager from. Each name maps onto what plughost already serves under
``hermes_cli.plugins``: the context is plughost's, hooks are fired by
plughost's loop, and the host has loaded every enabled plugin before any
plugin code runs.
"""
