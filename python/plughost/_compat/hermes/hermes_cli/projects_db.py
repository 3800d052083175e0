"""``hermes_cli.projects_db``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "hermes_cli.projects_db is not hosted by plughost: plughost has no Hermes Projects (the Desktop's project database of folders, sessions and boards); a plugin that needs one runs under Hermes",
    name="hermes_cli.projects_db",
)
