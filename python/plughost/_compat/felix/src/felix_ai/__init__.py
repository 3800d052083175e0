"""plughost's compat ``felix_ai`` package (a real installation wins)."""
