"""Compat package: ``flowly.agent.hooks`` and ``flowly.agent.tools.web_providers``."""


def __getattr__(name: str):
    # Submodules run when first imported (see _plughost_flowly_lazy); reached
    # as attributes, they are imported then, as if imported up front.
    if name in ("hooks", "tools"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
