"""plughost's stand-in for the ``flowly`` package.

Installed only when no real ``flowly`` is importable, so that unmodified
Flowly plugins can ``import flowly.agent.hooks`` / ``flowly.plugins`` /
``flowly.profile`` inside plughost.
"""

__plughost_compat__ = True


def __getattr__(name: str):
    # Submodules run when first imported (see _plughost_flowly_lazy); reached
    # as attributes, they are imported then, as if imported up front.
    if name in ("agent", "plugins", "profile"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
