"""plughost's built-in ``web_search`` and ``web_extract`` tools (module ``_plughost_web``).

The Rust tools (``src/agent/tools/web.rs``) call :func:`web_search`,
:func:`web_extract`, :func:`unavailable` and :func:`report` here.  They hand
each call to the active provider of ``flowly.agent.tools.web_providers``
(a real Flowly's registry when one is installed, else plughost's compat
one), awaiting ``async def`` provider methods and running sync ones in a
worker thread, as Flowly's tools do, and format the answer as Flowly does.

This module is installed whether or not a real Flowly is: the compat
``flowly.agent.tools.web`` re-exports its Flowly-named helpers
(``_validate_url``, ``_fetch_readable``, ...), which providers import.

``web_extract`` refuses private, loopback and link-local addresses with
Flowly's messages, unless ``tools.web.allowPrivateUrls`` is ``true`` in
the host's ``config.json`` (for tests and local use; cloud metadata host
names stay refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import html
import inspect
import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

#: The home of the host whose built-in web tool is running (the tools run
#: outside any plugin's frames, so ``caller_home()`` cannot find it).
HOME: "contextvars.ContextVar[str | None]" = contextvars.ContextVar("plughost_web_home", default=None)

USER_AGENT = "Mozilla/5.0 (compatible; plughost web_extract)"

_BLOCKED_NETWORKS = [
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("10.0.0.0/8"),
    ipaddress.ip_network("172.16.0.0/12"),
    ipaddress.ip_network("192.168.0.0/16"),
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("::1/128"),
    ipaddress.ip_network("fc00::/7"),
    ipaddress.ip_network("fe80::/10"),
]

_BLOCKED_HOSTS = frozenset(
    {"metadata.google.internal", "metadata.digitalocean.com", "100.100.100.200"}
)


# ── Settings ─────────────────────────────────────────────────────


def _home() -> Path | None:
    home = HOME.get()
    if home:
        return Path(home)
    try:
        import _plughost_runtime

        found = _plughost_runtime.caller_home() or _plughost_runtime.HOME
    except ImportError:
        found = None
    found = found or os.environ.get("PLUGHOST_HOME")
    return Path(found) if found else None


@contextlib.contextmanager
def pinned_home() -> Iterator[None]:
    """Keep the calling host's home for work handed to other threads
    (``asyncio.to_thread`` copies context variables; a worker thread has no
    plugin frames for ``caller_home()`` to find)."""
    home = _home()
    if home is None:
        yield
        return
    token = HOME.set(str(home))
    try:
        yield
    finally:
        HOME.reset(token)


def _web_config() -> dict[str, Any]:
    home = _home()
    if home is None:
        return {}
    try:
        data = json.loads((home / "config.json").read_text(encoding="utf-8"))
        block = data["tools"]["web"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return block if isinstance(block, dict) else {}


def private_urls_allowed() -> bool:
    """``tools.web.allowPrivateUrls`` (or ``allow_private_urls``) is ``true``."""
    config = _web_config()
    return any(config.get(k) is True for k in ("allowPrivateUrls", "allow_private_urls"))


# ── Flowly's URL rule ────────────────────────────────────────────


def _validate_url(url: str) -> tuple[bool, str]:
    """Flowly's SSRF rule: http(s) only, no cloud metadata host, no
    localhost, no private, loopback or link-local address (the last three
    allowed by ``tools.web.allowPrivateUrls``)."""
    try:
        parsed = urlparse(url)
    except Exception:
        return False, "Could not parse URL"
    if parsed.scheme not in ("http", "https"):
        return False, f"Scheme '{parsed.scheme}' not allowed (only http/https)"
    try:
        host = parsed.hostname or ""
    except ValueError:
        return False, "Could not parse URL"
    if not host:
        return False, "Empty hostname"
    if host in _BLOCKED_HOSTS:
        return False, f"Host '{host}' is blocked (cloud metadata endpoint)"
    if private_urls_allowed():
        return True, ""
    if host in ("localhost", "0.0.0.0"):
        return False, "Localhost access is blocked"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return True, ""
    for network in _BLOCKED_NETWORKS:
        if ip in network:
            return False, f"IP {host} is in blocked private range {network}"
    return True, ""


# ── Fetching a page (the local provider) ─────────────────────────


_checked_redirects = None


def _redirect_handler():
    """The redirect handler that follows a redirect only to a URL the rule
    allows (built on first use: the HTTP stack loads when a page is fetched)."""
    global _checked_redirects
    if _checked_redirects is None:
        import urllib.error
        import urllib.request

        class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
            """Follows a redirect only to a URL the rule allows."""

            def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
                ok, reason = _validate_url(newurl)
                if not ok:
                    raise urllib.error.URLError(f"redirect to {newurl} refused: {reason}")
                return super().redirect_request(req, fp, code, msg, headers, newurl)

        _checked_redirects = _CheckedRedirects
    return _checked_redirects


def _strip_tags(text: str) -> str:
    text = re.sub(r"<script[\s\S]*?</script>", "", text, flags=re.I)
    text = re.sub(r"<style[\s\S]*?</style>", "", text, flags=re.I)
    text = re.sub(r"<[^>]+>", "", text)
    return html.unescape(text).strip()


def _normalize(text: str) -> str:
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _html_to_markdown(content: str) -> str:
    """A light HTML → markdown approximation (links, headings, list items, paragraphs)."""
    for tag in ("script", "style", "noscript", "nav", "header", "footer", "aside", "form"):
        content = re.sub(rf"<{tag}\b[\s\S]*?</{tag}>", "", content, flags=re.I)
    text = re.sub(
        r"<a\s+[^>]*href=[\"']([^\"']+)[\"'][^>]*>([\s\S]*?)</a>",
        lambda m: f"[{_strip_tags(m[2])}]({m[1]})",
        content,
        flags=re.I,
    )
    text = re.sub(
        r"<h([1-6])[^>]*>([\s\S]*?)</h\1>",
        lambda m: f"\n{'#' * int(m[1])} {_strip_tags(m[2])}\n",
        text,
        flags=re.I,
    )
    text = re.sub(r"<li[^>]*>([\s\S]*?)</li>", lambda m: f"\n- {_strip_tags(m[1])}", text, flags=re.I)
    text = re.sub(r"</(p|div|section|article)>", "\n\n", text, flags=re.I)
    text = re.sub(r"<(br|hr)\s*/?>", "\n", text, flags=re.I)
    return _normalize(_strip_tags(text))


def _main_html(page: str) -> tuple[str, str]:
    """The page's title and its main content (``<article>``, ``<main>``, else ``<body>``)."""
    match = re.search(r"<title[^>]*>([\s\S]*?)</title>", page, flags=re.I)
    title = _normalize(_strip_tags(match[1])) if match else ""
    for tag in ("article", "main", "body"):
        found = re.search(rf"<{tag}\b[^>]*>([\s\S]*?)</{tag}>", page, flags=re.I)
        if found:
            return title, found[1]
    return title, page


def _split_into_passages(text: str, min_len: int = 80) -> list[str]:
    passages: list[str] = []
    for chunk in re.split(r"\n{2,}|(?=^#{1,6}\s)", text, flags=re.MULTILINE):
        chunk = chunk.strip()
        if len(chunk) >= min_len:
            passages.append(chunk)
        elif passages:
            passages[-1] += "\n" + chunk
    return passages or [text]


def _extract_relevant_passages(text: str, query: str, max_chars: int = 5000) -> str:
    """The passages sharing most words with *query*, in page order, within *max_chars*."""
    if len(text) <= max_chars:
        return text
    terms = set(re.findall(r"\w{3,}", query.lower()))
    passages = _split_into_passages(text)

    def score(passage: str) -> float:
        words = set(re.findall(r"\w{3,}", passage.lower()))
        if not words or not terms:
            return 0.0
        lower = passage.lower()
        return len(words & terms) + sum(1.5 for t in terms if t in lower)

    ranked = sorted(enumerate(passages), key=lambda p: -score(p[1]))
    selected: list[tuple[int, str]] = []
    remaining = max_chars
    for index, passage in ranked:
        if remaining <= 0:
            break
        if len(passage) <= remaining:
            selected.append((index, passage))
            remaining -= len(passage) + 2
        elif remaining > 200:
            selected.append((index, passage[:remaining]))
            remaining = 0
    selected.sort()
    result = "\n\n".join(p for _, p in selected)
    if len(result) < len(text):
        result += f"\n\n[... {len(text) - len(result)} chars of lower-relevance content omitted]"
    return result


def _fetch(url: str, timeout: float) -> tuple[str, int, str, str]:
    import urllib.request

    opener = urllib.request.build_opener(_redirect_handler())
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with opener.open(request, timeout=timeout) as response:
        body = response.read(20 * 1024 * 1024 + 1)
        if len(body) > 20 * 1024 * 1024:
            raise ValueError("the page is larger than 20 MiB")
        charset = response.headers.get_content_charset() or "utf-8"
        return (
            response.geturl(),
            response.status,
            response.headers.get("Content-Type", ""),
            body.decode(charset, "replace"),
        )


async def _fetch_readable(
    url: str,
    query: str | None = None,
    extract_mode: str = "markdown",
    max_chars: int = 50000,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Fetch *url* and return its readable content (Flowly's result keys),
    or ``{"error": ..., "url": ...}``.  The caller checks *url* first."""
    import socket
    import urllib.error

    try:
        with pinned_home():
            final_url, status, ctype, body = await asyncio.to_thread(_fetch, url, timeout)
    except urllib.error.HTTPError as exc:
        return {"error": f"HTTP {exc.code} fetching {url}", "url": url}
    except (socket.timeout, TimeoutError):
        return {"error": f"{url} did not answer within {timeout:g} s", "url": url}
    except urllib.error.URLError as exc:
        return {"error": f"could not fetch {url}: {exc.reason}", "url": url}
    except Exception as exc:  # noqa: BLE001 - any failure is this URL's error
        return {"error": f"could not fetch {url}: {exc}", "url": url}
    title = ""
    if "application/json" in ctype:
        try:
            text, extractor = json.dumps(json.loads(body), indent=2), "json"
        except ValueError:
            text, extractor = body, "raw"
    elif "text/html" in ctype or body[:256].lower().lstrip().startswith(("<!doctype", "<html")):
        title, main = _main_html(body)
        content = _html_to_markdown(main) if extract_mode == "markdown" else _normalize(_strip_tags(main))
        text = f"# {title}\n\n{content}" if title else content
        extractor = "readability"
    else:
        text, extractor = body, "raw"
    original = len(text)
    if query and len(text) > max_chars:
        text = _extract_relevant_passages(text, query, max_chars)
        extractor += "+relevance"
    elif len(text) > max_chars:
        text = text[:max_chars]
    return {
        "url": url,
        "finalUrl": final_url,
        "status": status,
        "extractor": extractor,
        "truncated": len(text) < original,
        "length": len(text),
        "originalLength": original,
        "title": title,
        "text": text,
    }


# ── Formatting ───────────────────────────────────────────────────


def _format_search_results(query: str, data: Any) -> str:
    """A provider's search answer as the text the model reads (Flowly's layout)."""
    if not isinstance(data, dict):
        return f"Error: the web search provider answered with {type(data).__name__}, not a dict"
    if not data.get("success", True):
        return str(data.get("error") or f"No results for: {query}")
    payload = data.get("data", {}) or {}
    web = payload.get("web", []) or []
    if not web:
        return f"No results for: {query}"
    lines = [f"Results for: {query}\n"]
    if summary := payload.get("summary"):
        lines.append(f"Summary: {summary}\n")
    for i, item in enumerate(web, 1):
        if not isinstance(item, dict):
            continue
        line = f"{i}. {item.get('title', '')}\n   {item.get('url', '')}"
        if desc := item.get("description"):
            line += f"\n   {desc}"
        for snippet in item.get("extra_snippets", []) or []:
            line += f"\n   > {snippet}"
        meta = []
        if age := item.get("age"):
            meta.append(age)
        if page_age := item.get("page_age"):
            meta.append(f"published: {page_age}")
        if lang := item.get("language"):
            meta.append(f"lang: {lang}")
        if source := item.get("source"):
            meta.append(source)
        hostname = (item.get("meta_url") or {}).get("hostname", "")
        if hostname:
            meta.append(hostname)
        if meta:
            line += f"\n   [{' · '.join(str(m) for m in meta)}]"
        lines.append(line)
    if news := payload.get("news"):
        lines.append("\nRecent News:")
        for item in news:
            lines.append(
                f"- {item.get('title', '')} ({item.get('source', '')}, {item.get('age', '')})\n  {item.get('url', '')}"
            )
    return "\n".join(lines)


# ── Running providers ────────────────────────────────────────────


async def _run_provider_search(provider: Any, query: str, n: int) -> Any:
    if inspect.iscoroutinefunction(provider.search):
        return await provider.search(query, n)
    return await asyncio.to_thread(provider.search, query, n)


async def _run_provider_extract(provider: Any, urls: list[str], **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(provider.extract):
        return await provider.extract(urls, **kwargs)
    return await asyncio.to_thread(lambda: provider.extract(urls, **kwargs))


def _registry():
    from flowly.agent.tools import web_providers

    return web_providers


def _active(capability: str) -> Any:
    registry = _registry()
    if capability == "search":
        return registry.get_active_search_provider()
    return registry.get_active_extract_provider()


def _why_not(provider: Any) -> str:
    """Why *provider* is unavailable, in its own words when it says (plughost's
    compat providers do), else what its ``is_available()`` did."""
    reason = getattr(provider, "unavailable_reason", None)
    if callable(reason):
        try:
            text = reason()
            if isinstance(text, str) and text:
                return text
        except Exception as exc:  # noqa: BLE001
            return f"its unavailable_reason() raised {type(exc).__name__}: {exc}"
    try:
        provider.is_available()
    except Exception as exc:  # noqa: BLE001
        return f"its is_available() raised {type(exc).__name__}: {exc}"
    return "its is_available() returned False"


def _capable(provider: Any, capability: str) -> bool:
    try:
        return bool(getattr(provider, f"supports_{capability}")())
    except Exception:  # noqa: BLE001
        return False


def _available(provider: Any) -> bool:
    try:
        return bool(provider.is_available())
    except Exception:  # noqa: BLE001
        return False


def _providers() -> list[Any]:
    registry = _registry()
    listing = getattr(registry, "list_providers", None)
    if listing is None:
        from flowly.agent.tools.web_providers import registry as module

        listing = module.list_providers
    return list(listing())


def unavailable(home: str, capability: str) -> str | None:
    """None when the ``web_<capability>`` tool can serve calls, else why not."""
    token = HOME.set(home)
    try:
        provider = _active(capability)
        if provider is not None and _available(provider):
            return None
        what = "web search" if capability == "search" else "web extract"
        if provider is not None:
            return f"the configured {what} backend '{provider.name}' is not available: {_why_not(provider)}"
        capable = [p for p in _providers() if _capable(p, capability)]
        if not capable:
            return (
                f"no {what} provider is registered; enable a web backend plugin "
                "(plughost plugins list shows the bundled web-* ones)"
            )
        reasons = "; ".join(f"{p.name}: {_why_not(p)}" for p in capable)
        return f"no {what} provider is available ({reasons}); configure one under tools.web.search in config.json"
    finally:
        HOME.reset(token)


async def web_search(home: str, arguments: str) -> str:
    """Flowly's ``web_search`` tool: ``{"query": str, "count": int}``."""
    HOME.set(home)
    args = json.loads(arguments)
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return "Error: web_search needs a non-empty 'query' string"
    count = args.get("count") or 5
    provider = _active("search")
    if provider is None:
        return "Error: Web search not available. No API key or proxy configured."
    try:
        data = await _run_provider_search(provider, query, int(count))
    except Exception as exc:  # noqa: BLE001 - Flowly answers with the error text
        return f"Error: {exc}"
    return _format_search_results(query, data)


async def web_extract(home: str, arguments: str) -> str:
    """Flowly's ``web_extract`` tool: ``{"urls": [...], "query", "format", "maxChars"}``."""
    HOME.set(home)
    args = json.loads(arguments)
    urls = args.get("urls")
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not urls:
        return json.dumps({"success": False, "error": "Provide a non-empty list of URLs."})
    cap = args.get("maxChars") or 50000
    valid: list[str] = []
    results: list[dict[str, Any]] = []
    for u in urls:
        ok, reason = _validate_url(str(u))
        if ok:
            valid.append(str(u))
        else:
            results.append({"url": u, "title": "", "content": "", "error": reason})
    if not valid:
        return json.dumps({"success": False, "results": results})
    provider = _active("extract")
    if provider is None:
        return json.dumps({"success": False, "error": "No web extract provider is available.", "results": results})
    try:
        extracted = await _run_provider_extract(
            provider, valid, format=args.get("format"), query=args.get("query"), max_chars=cap
        )
    except Exception as exc:  # noqa: BLE001
        return json.dumps({"success": False, "error": str(exc), "backend": provider.name})
    for item in extracted or []:
        if not isinstance(item, dict):
            continue
        content = item.get("content") or ""
        truncated = len(content) > cap
        entry: dict[str, Any] = {
            "url": item.get("url", ""),
            "title": item.get("title", ""),
            "content": content[:cap] if truncated else content,
        }
        if truncated:
            entry["truncated"] = True
        if item.get("error"):
            entry["error"] = item["error"]
        results.append(entry)
    return json.dumps({"success": True, "backend": provider.name, "results": results})


def report(home: str) -> str:
    """Per capability: every registered provider able to serve it, whether
    it is available and why not, and the active one (JSON for doctor)."""
    token = HOME.set(home)
    try:
        out: dict[str, Any] = {}
        providers = _providers()
        for capability in ("search", "extract"):
            active = _active(capability)
            rows = []
            for p in providers:
                if not _capable(p, capability):
                    continue
                ok = _available(p)
                rows.append(
                    {
                        "name": p.name,
                        "display_name": str(getattr(p, "display_name", p.name)),
                        "available": ok,
                        "reason": "" if ok else _why_not(p),
                    }
                )
            out[capability] = {
                "active": active.name if active is not None and _available(active) else None,
                "configured": active.name if active is not None and not _available(active) else None,
                "providers": rows,
            }
        return json.dumps(out)
    finally:
        HOME.reset(token)


# ── Providers of a plugin in a worker process (issue 47) ─────────
#
# A plugin running isolated registers its providers in its worker's
# registry; the worker announces them (``worker_announce``) and runs their
# methods when asked (``worker_call``). plughost registers a
# ``_WorkerProvider`` of the same name in its own registry, whose methods
# ask the worker through ``call(method, args_json, kwargs_json)`` (a native
# function that waits with the GIL released and returns the answer's JSON).

_REGISTRY_MODULE = "flowly.agent.tools.web_providers.registry"


def worker_names() -> "list[str]":
    """The providers registered so far in this process (none when no
    registry was imported: nothing registered one)."""
    import sys

    if _REGISTRY_MODULE not in sys.modules:
        return []
    return [p.name for p in _registry().list_providers()]


def worker_announce(before: "list[str]") -> str:
    """The providers registered since ``before`` (``worker_names()``), as
    JSON: ``[{"name", "display_name", "search", "extract"}, ...]``."""
    import sys

    if _REGISTRY_MODULE not in sys.modules:
        return "[]"
    out = []
    for p in _registry().list_providers():
        if p.name in before:
            continue
        out.append(
            {
                "name": p.name,
                "display_name": str(getattr(p, "display_name", p.name)),
                "search": _capable(p, "search"),
                "extract": _capable(p, "extract"),
            }
        )
    return json.dumps(out)


async def worker_call(name: str, method: str, args_json: str, kwargs_json: str) -> str:
    """Run ``method`` of this worker's provider ``name`` (awaited when
    async, in a thread when not); its answer as JSON (``null`` for a
    method the provider does not have, such as ``unavailable_reason``)."""
    provider = _registry().get_provider(name)
    if provider is None:
        raise LookupError(f"no web provider '{name}' in this worker")
    fn = getattr(provider, method, None)
    if not callable(fn):
        return "null"
    args, kwargs = json.loads(args_json), json.loads(kwargs_json)
    with pinned_home():
        if inspect.iscoroutinefunction(fn):
            result = await fn(*args, **kwargs)
        else:
            result = await asyncio.to_thread(fn, *args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
    return json.dumps(result, default=str)


def register_worker_provider(name: str, display_name: str, search: bool, extract: bool, call: Any) -> None:
    """Register in this process's registry a provider whose code runs in a
    plugin's worker (``call`` reaches it)."""
    from flowly.agent.tools.web_providers.base import WebSearchProvider

    def ask(method: str, *args: Any, **kwargs: Any) -> Any:
        return json.loads(call(method, json.dumps(list(args)), json.dumps(kwargs)))

    class _WorkerProvider(WebSearchProvider):
        @property
        def name(self) -> str:
            return name

        @property
        def display_name(self) -> str:
            return display_name

        def supports_search(self) -> bool:
            return search

        def supports_extract(self) -> bool:
            return extract

        def is_available(self) -> bool:
            return bool(ask("is_available"))

        def unavailable_reason(self) -> "str | None":
            return ask("unavailable_reason")

        def search(self, query: str, limit: int = 5) -> Any:
            return ask("search", query, limit)

        def extract(self, urls: "list[str]", **kwargs: Any) -> Any:
            return ask("extract", urls, **kwargs)

        def get_setup_schema(self) -> "dict[str, Any]":
            return ask("get_setup_schema") or {}

    _registry().register_provider(_WorkerProvider())
