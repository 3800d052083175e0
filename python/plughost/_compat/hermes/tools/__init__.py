"""``tools`` compat package (plughost): only ``tools.registry``."""
