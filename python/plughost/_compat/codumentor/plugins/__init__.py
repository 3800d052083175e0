"""Compat ``codumentor.plugins`` (see the package docs)."""
