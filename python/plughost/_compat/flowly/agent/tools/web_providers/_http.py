"""One JSON request to a provider's service, with errors that say what
went wrong (plughost compat; standard library only, no httpx needed).

The HTTP stack (``urllib.request``, which brings ``http.client``, ``ssl``
and ``email``) is imported by the first request, not with this module:
every host that loads a Flowly plugin installs it, few send a request."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A request to a provider's service failed; ``str()`` is for people."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _detail(body: bytes) -> str:
    """The service's own error message in an error response, if any."""
    import json

    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text[:200]
    if isinstance(data, dict):
        for key in ("detail", "error", "message"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("detail") or value.get("error")
            if isinstance(value, str) and value.strip():
                return value.strip()[:200]
    return ""


def request_json(
    service: str,
    method: str,
    url: str,
    *,
    params: dict[str, Any] | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15.0,
    credentials: str = "",
) -> Any:
    """Send one request and return the decoded JSON answer.

    Raises :class:`ServiceError` naming *service* on an HTTP error status
    (401/403 point at *credentials*, 429 says to retry later), a timeout,
    an unreachable service, or an answer that is not JSON.
    """
    import json
    import socket
    import urllib.error
    import urllib.parse
    import urllib.request

    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    data = None
    all_headers = {"Accept": "application/json", "User-Agent": "plughost"}
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        all_headers["Content-Type"] = "application/json"
    all_headers.update(headers or {})
    request = urllib.request.Request(url, data=data, headers=all_headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = _detail(exc.read() or b"")
        said = f": {detail}" if detail else ""
        if exc.code in (401, 403):
            hint = f"; check {credentials}" if credentials else ""
            raise ServiceError(
                f"{service} rejected the credentials (HTTP {exc.code}){said}{hint}", exc.code
            ) from None
        if exc.code == 429:
            raise ServiceError(
                f"{service} rate limit reached (HTTP 429){said}; try again later", 429
            ) from None
        raise ServiceError(f"{service} returned HTTP {exc.code}{said}", exc.code) from None
    except (socket.timeout, TimeoutError):
        raise ServiceError(f"{service} did not answer within {timeout:g} s") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise ServiceError(f"{service} did not answer within {timeout:g} s") from None
        raise ServiceError(f"could not reach {service} at {url}: {reason}") from None
    except OSError as exc:
        raise ServiceError(f"could not reach {service} at {url}: {exc}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ServiceError(f"{service} answered with malformed JSON ({exc})") from None


def post_json(
    service: str,
    provider: str,
    path: str,
    body: Any,
    *,
    default_base: str,
    default_timeout: float,
    headers: dict[str, str] | None = None,
    credentials: str = "",
    base: str = "",
) -> Any:
    """POST *body* to ``<base>/<path>`` of *provider*'s service and return
    the decoded JSON answer, as :func:`request_json` does.

    The base URL is *base* when given (a self-hosted instance), else the
    provider's configured one (:func:`base_url`), else *default_base*; the
    timeout is the configured one, else *default_timeout*.
    """
    from flowly.agent.tools.web_providers._config import base_url, timeout

    return request_json(
        service,
        "POST",
        f"{base or base_url(provider, default_base)}/{path}",
        body=body,
        headers=headers,
        timeout=timeout(provider, default_timeout),
        credentials=credentials,
    )


__all__ = ["ServiceError", "request_json", "post_json"]
