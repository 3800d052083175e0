"""``gateway.platforms`` compat package (plughost)."""
