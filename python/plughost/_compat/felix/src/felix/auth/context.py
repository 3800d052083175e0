"""``felix.auth.context``: what a plugin authenticator returns for a caller it
accepts (plughost's, in Felix's shape). A ``register_authenticator`` mode
selected with ``plughost serve --auth MODE`` answers each request with an
:class:`AuthContext` (accepted) or a Starlette response (sent as it is)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: The modes plughost resolves itself: a plugin cannot register these.
BUILTIN_AUTH_MODES = frozenset({"none", "api_key", "jwt"})


@dataclass(slots=True)
class Principal:
    subject: str
    tenant_id: str
    scopes: frozenset = field(default_factory=frozenset)
    issuer: str = ""
    scheme: str = "anonymous"


OutboundTokenFn = Callable[[dict], Awaitable[str]]


async def _empty_outbound(_target: dict) -> str:
    return ""


@dataclass(slots=True)
class AuthContext:
    principal: Principal
    outbound_token: OutboundTokenFn = _empty_outbound
    anonymous: bool = False
    raw_claims: dict = field(default_factory=dict)


ANONYMOUS = AuthContext(
    principal=Principal(subject="", tenant_id="default", scopes=frozenset(), issuer="anonymous", scheme="anonymous"),
    outbound_token=_empty_outbound,
    anonymous=True,
)


def require_scope(auth: AuthContext, *scopes: str) -> None:
    """Raise ``PermissionError`` unless the principal has every scope."""
    missing = [s for s in scopes if s not in auth.principal.scopes]
    if missing:
        raise PermissionError(f"missing scope: {', '.join(missing)}")


__all__ = ["ANONYMOUS", "BUILTIN_AUTH_MODES", "AuthContext", "OutboundTokenFn", "Principal", "require_scope"]
