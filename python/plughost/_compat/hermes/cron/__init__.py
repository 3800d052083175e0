"""``cron``: not hosted by plughost (imported from a plugin, it raises ImportError)."""

raise ImportError(
    "cron is not hosted by plughost: plughost does not run Hermes cron jobs (scheduled agent prompts); plughost schedules only plugins' own tasks (plughost cron list)",
    name="cron",
)
