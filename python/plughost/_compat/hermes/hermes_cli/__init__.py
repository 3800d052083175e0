"""``hermes_cli`` compat package (plughost): only the modules Hermes plugins import."""
