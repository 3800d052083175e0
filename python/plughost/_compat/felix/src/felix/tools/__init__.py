"""plughost's compat ``felix.tools``."""
