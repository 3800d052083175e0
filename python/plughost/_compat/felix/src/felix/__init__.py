"""plughost's compat ``felix`` package: the surface Felix plugins import
(a real Felix installation always wins over it)."""
