"""Compat ``codumentor.agent`` (see the package docs)."""
