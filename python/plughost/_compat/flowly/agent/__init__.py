"""Compat package: ``flowly.agent.hooks`` and ``flowly.agent.tools.web_providers``."""
