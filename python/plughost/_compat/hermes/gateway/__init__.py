"""``gateway`` compat package (plughost): the platform base plugins subclass."""
