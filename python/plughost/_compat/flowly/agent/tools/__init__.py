"""Compat package: only ``flowly.agent.tools.web_providers`` is provided."""
