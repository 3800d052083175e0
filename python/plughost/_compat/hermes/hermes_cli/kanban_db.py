"""``hermes_cli.kanban_db``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "hermes_cli.kanban_db is not hosted by plughost: plughost has no Kanban board (no task database, dispatcher or workers); a plugin that needs one runs under Hermes",
    name="hermes_cli.kanban_db",
)
