"""Compat package: only ``flowly.agent.hooks`` is provided."""
