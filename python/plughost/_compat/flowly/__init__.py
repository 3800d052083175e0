"""plughost's stand-in for the ``flowly`` package.

Installed only when no real ``flowly`` is importable, so that unmodified
Flowly plugins can ``import flowly.agent.hooks`` / ``flowly.plugins`` /
``flowly.profile`` inside plughost.
"""

__plughost_compat__ = True
