"""plughost compat package."""
