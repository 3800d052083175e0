"""``gateway.platforms.base`` compat (plughost): the adapter base class
Hermes's platform plugins subclass, with the message event and send
result they speak in.

Under ``plughost serve`` the gateway (``docs/gateway.md``) builds an
adapter with the plugin's ``adapter_factory``, wires it
(:func:`_plughost_attach`) and calls ``connect()``; the adapter hands each
inbound message to ``handle_message(event)``, which passes it to the
gateway. The gateway queues or merges it per chat as Hermes's base class
does (a message arriving while the chat's turn runs interrupts it and runs
next; photo bursts merge), runs the turn, and sends the reply and tool
progress back through ``send`` / ``edit_message`` (``_send_with_retry``).
A listener that dies reports it as Hermes's do (``_set_fatal_error`` then
``_notify_fatal_error``) and the gateway reconnects with a backoff.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from gateway.config import Platform, PlatformConfig
from gateway.session import SessionSource, build_session_key
from gateway.platforms.event import MessageEvent, MessageType, ProcessingOutcome

logger = logging.getLogger(__name__)

GATEWAY_SECRET_CAPTURE_UNSUPPORTED_MESSAGE = (
    "Secure secret entry is not supported over messaging. "
    "Load this skill in the local CLI to be prompted, or add the key to ~/.hermes/.env manually."
)

_AUDIO_EXTS = frozenset({".ogg", ".opus", ".mp3", ".wav", ".m4a", ".flac"})


def _platform_name(platform) -> str:
    value = getattr(platform, "value", platform)
    return str(value or "").lower()


def should_send_media_as_audio(platform, ext: str, is_voice: bool = False) -> bool:
    ext = (ext or "").lower()
    if ext not in _AUDIO_EXTS:
        return False
    if _platform_name(platform) == "telegram":
        if ext in (".ogg", ".opus"):
            return is_voice
        return ext in (".mp3", ".m4a")
    return True


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def safe_url_for_log(url: str, max_len: int = 80) -> str:
    raw = "" if url is None else str(url)
    raw = raw.split("?", 1)[0].split("#", 1)[0]
    if "@" in raw and "://" in raw:
        scheme, rest = raw.split("://", 1)
        raw = f"{scheme}://{rest.rsplit('@', 1)[-1]}"
    return raw if len(raw) <= max_len else raw[: max(0, max_len - 3)] + "..."


def _hermes_cache(sub: str) -> Path:
    from hermes_constants import get_hermes_home

    path = Path(get_hermes_home()) / "cache" / sub
    path.mkdir(parents=True, exist_ok=True)
    return path


def get_image_cache_dir() -> Path:
    return _hermes_cache("images")


def get_audio_cache_dir() -> Path:
    return _hermes_cache("audio")


def get_document_cache_dir() -> Path:
    return _hermes_cache("documents")


def cache_image_from_bytes(data: bytes, ext: str = ".jpg") -> str:
    path = get_image_cache_dir() / f"img_{uuid.uuid4().hex[:12]}{ext}"
    path.write_bytes(data)
    return str(path)


def cache_audio_from_bytes(data: bytes, ext: str = ".ogg") -> str:
    path = get_audio_cache_dir() / f"audio_{uuid.uuid4().hex[:12]}{ext}"
    path.write_bytes(data)
    return str(path)


def get_video_cache_dir() -> Path:
    return _hermes_cache("videos")


SUPPORTED_VIDEO_TYPES = {
    ".mp4": "video/mp4", ".mov": "video/quicktime", ".webm": "video/webm",
    ".mkv": "video/x-matroska", ".avi": "video/x-msvideo"}


def cache_video_from_bytes(data: bytes, ext: str = ".mp4") -> str:
    """Raw video bytes saved in ``$HERMES_HOME/cache/videos``; the file's path."""
    validate_inbound_media_size(len(data), media_type="video")
    path = get_video_cache_dir() / f"video_{uuid.uuid4().hex[:12]}{ext}"
    path.write_bytes(data)
    return str(path)


# Inbound media is held in memory before it is cached: Hermes's cap.
DEFAULT_INBOUND_MEDIA_MAX_BYTES = 128 * 1024 * 1024


def validate_inbound_media_size(size: int, *, media_type: str = "media",
                                max_bytes: Optional[int] = None) -> None:
    """``ValueError`` when an inbound payload is over the cap (``0``: no cap)."""
    limit = DEFAULT_INBOUND_MEDIA_MAX_BYTES if max_bytes is None else max_bytes
    if limit and size > limit:
        raise ValueError(f"Inbound {media_type} payload is too large ({size} bytes > {limit} bytes)")


def _looks_like_image(data: bytes) -> bool:
    """``data`` starts with a PNG, JPEG, GIF, BMP or WebP signature."""
    if len(data) < 4:
        return False
    return (
        data[:8] == b"\x89PNG\r\n\x1a\n"
        or data[:3] == b"\xff\xd8\xff"
        or data[:6] in {b"GIF87a", b"GIF89a"}
        or data[:2] == b"BM"
        or (data[:4] == b"RIFF" and len(data) >= 12 and data[8:12] == b"WEBP"))


def _is_safe_url(url: str) -> bool:
    """An http(s) URL whose host resolves only to public addresses (no
    loopback, private, link-local, reserved or multicast one): the check
    Hermes makes before fetching a URL a chat message carries."""
    import ipaddress
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not host:
        return False
    try:
        infos = socket.getaddrinfo(host, port or (443 if parts.scheme == "https" else 80))
    except OSError:
        return False
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if (address.is_private or address.is_loopback or address.is_link_local or address.is_reserved
                or address.is_multicast or address.is_unspecified):
            return False
    return bool(infos)


def _fetch_capped(url: str, accept: str, media_type: str) -> bytes:
    """GET ``url`` (each redirect checked as the URL was), its body under the cap."""
    import urllib.request

    class _Checked(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            if not _is_safe_url(newurl):
                raise ValueError(f"Blocked redirect to private/internal address: {safe_url_for_log(newurl)}")
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    request = urllib.request.Request(url, headers={
        "User-Agent": "Mozilla/5.0 (compatible; HermesAgent/1.0)", "Accept": accept})
    with urllib.request.build_opener(_Checked).open(request, timeout=30.0) as response:
        declared = response.headers.get("content-length")
        if declared and declared.isdigit():
            validate_inbound_media_size(int(declared), media_type=media_type)
        chunks, total = [], 0
        while True:
            chunk = response.read(64 * 1024)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            validate_inbound_media_size(total, media_type=media_type)
            chunks.append(chunk)


async def cache_image_from_url(url: str, ext: str = ".jpg", retries: int = 2) -> str:
    """Download an image URL into the image cache; the file's path. A URL
    that is not public (or redirects to one that is not) raises
    ``ValueError``; timeouts, 429 and 5xx answers are retried after 1.5 s,
    3 s, …; what is not an image is refused."""
    import urllib.error

    if not _is_safe_url(url):
        raise ValueError(f"Blocked unsafe URL (SSRF protection): {safe_url_for_log(url)}")
    for attempt in range(retries + 1):
        try:
            data = await asyncio.to_thread(_fetch_capped, url, "image/*,*/*;q=0.8", "image")
        except (urllib.error.URLError, TimeoutError) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                transient = exc.code >= 429
            else:
                transient = isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)
            if not transient or attempt >= retries:
                raise
            await asyncio.sleep(1.5 * (attempt + 1))
            continue
        validate_inbound_media_size(len(data), media_type="image")
        if not _looks_like_image(data):
            snippet = data[:80].decode("utf-8", errors="replace")
            raise ValueError(f"Refusing to cache non-image data as {ext} (starts with: {snippet!r})")
        return cache_image_from_bytes(data, ext)
    raise AssertionError("unreachable")


def cache_document_from_bytes(data: bytes, filename: str) -> str:
    name = Path(filename).name.replace("\x00", "").strip() if filename else "document"
    if name in ("", ".", ".."):
        name = "document"
    path = get_document_cache_dir() / f"doc_{uuid.uuid4().hex[:12]}_{name}"
    path.write_bytes(data)
    return str(path)


@dataclass
class SendResult:
    """Result of sending a message."""

    success: bool
    message_id: Optional[str] = None
    error: Optional[str] = None
    raw_response: Any = None
    retryable: bool = False


MessageHandler = Callable[[MessageEvent], Awaitable[Optional[str]]]


def merge_pending_message_event(
    pending_messages: Dict[str, MessageEvent],
    session_key: str,
    event: MessageEvent,
    *,
    merge_text: bool = False,
) -> None:
    """Store or merge a pending event for a session (Hermes's rules)."""
    existing = pending_messages.get(session_key)
    if existing:
        if existing.media_urls or event.media_urls:
            existing.media_urls.extend(event.media_urls)
            existing.media_types.extend(event.media_types)
            if event.text:
                existing.text = f"{existing.text}\n{event.text}" if existing.text else event.text
            if MessageType.PHOTO in (existing.message_type, event.message_type):
                existing.message_type = MessageType.PHOTO
            return
        if merge_text and existing.message_type == MessageType.TEXT and event.message_type == MessageType.TEXT:
            if event.text:
                existing.text = f"{existing.text}\n{event.text}" if existing.text else event.text
            return
    pending_messages[session_key] = event


def resolve_channel_prompt(config_extra: dict, channel_id: str, parent_id: str | None = None):
    prompts = (config_extra or {}).get("channel_prompts") or {}
    if not isinstance(prompts, dict):
        return None
    for key in (channel_id, parent_id):
        prompt = prompts.get(key) if key else None
        if prompt is not None and str(prompt).strip():
            return str(prompt).strip()
    return None


_RETRYABLE_ERROR_PATTERNS = (
    "connecterror", "connectionerror", "connectionreset", "connectionrefused",
    "connecttimeout", "network", "broken pipe", "remotedisconnected", "eoferror",
)


class BasePlatformAdapter(ABC):
    """Base class for platform adapters (Hermes's contract)."""

    MAX_MESSAGE_LENGTH: int = 0
    REQUIRES_EDIT_FINALIZE: bool = False

    def __init__(self, config: PlatformConfig, platform: Platform):
        self.config = config if config is not None else PlatformConfig()
        self.platform = platform
        self._message_handler: Optional[MessageHandler] = None
        self._busy_session_handler = None
        self._session_store = None
        self._running = False
        self._fatal_error_code: Optional[str] = None
        self._fatal_error_message: Optional[str] = None
        self._fatal_error_retryable = True
        self._fatal_error_handler = None
        # No handler: platform events are dropped (Hermes fails closed).
        self._platform_event_handler = None
        self._active_sessions: Dict[str, asyncio.Event] = {}
        self._pending_messages: Dict[str, MessageEvent] = {}
        self._background_tasks: set = set()
        self._typing_paused: set = set()

    # -- state ---------------------------------------------------------
    @property
    def has_fatal_error(self) -> bool:
        return self._fatal_error_message is not None

    @property
    def fatal_error_message(self) -> Optional[str]:
        return self._fatal_error_message

    @property
    def fatal_error_code(self) -> Optional[str]:
        return self._fatal_error_code

    @property
    def fatal_error_retryable(self) -> bool:
        return self._fatal_error_retryable

    @property
    def name(self) -> str:
        return _platform_name(self.platform).title()

    @property
    def is_connected(self) -> bool:
        return self._running

    def set_message_handler(self, handler: MessageHandler) -> None:
        self._message_handler = handler

    def set_busy_session_handler(self, handler) -> None:
        self._busy_session_handler = handler

    def set_session_store(self, session_store: Any) -> None:
        self._session_store = session_store

    def set_platform_event_handler(self, handler) -> None:
        """``await handler(event, source)`` for an event that is not a
        message: ``event`` is ``{"platform", "event_type", "payload"}``."""
        self._platform_event_handler = handler

    def set_fatal_error_handler(self, handler) -> None:
        self._fatal_error_handler = handler

    def _wire_plugin_handlers(self, _client) -> None:
        """Hermes wires ``register_platform_handler`` callbacks here; plughost keeps none."""
        return None

    def _mark_connected(self) -> None:
        self._running = True
        self._fatal_error_code = None
        self._fatal_error_message = None
        self._fatal_error_retryable = True

    def _mark_disconnected(self) -> None:
        self._running = False

    def _set_fatal_error(self, code: str, message: str, *, retryable: bool) -> None:
        self._running = False
        self._fatal_error_code = code
        self._fatal_error_message = message
        self._fatal_error_retryable = retryable

    async def _notify_fatal_error(self) -> None:
        handler = self._fatal_error_handler
        if not handler:
            return
        result = handler(self)
        if asyncio.iscoroutine(result):
            await result

    def _acquire_platform_lock(self, scope: str, identity: str, resource_desc: str) -> bool:
        from gateway.status import acquire_scoped_lock

        self._platform_lock_scope = scope
        self._platform_lock_identity = identity
        acquired, existing = acquire_scoped_lock(scope, identity, metadata={"platform": _platform_name(self.platform)})
        if acquired:
            return True
        pid = existing.get("pid") if isinstance(existing, dict) else None
        message = f"{resource_desc} already in use" + (f" (PID {pid})" if pid else "") + ". Stop the other gateway first."
        logger.error("[%s] %s", self.name, message)
        self._set_fatal_error(f"{scope}_lock", message, retryable=False)
        return False

    def _release_platform_lock(self) -> None:
        identity = getattr(self, "_platform_lock_identity", None)
        if not identity:
            return
        from gateway.status import release_scoped_lock

        release_scoped_lock(self._platform_lock_scope, identity)
        self._platform_lock_identity = None

    # -- the contract --------------------------------------------------
    @abstractmethod
    async def connect(self) -> bool:
        """Connect to the platform and start receiving messages."""

    @abstractmethod
    async def disconnect(self) -> None:
        """Disconnect from the platform."""

    @abstractmethod
    async def send(self, chat_id: str, content: str, reply_to: Optional[str] = None,
                   metadata: Optional[Dict[str, Any]] = None) -> SendResult:
        """Send a message to a chat."""

    @abstractmethod
    async def get_chat_info(self, chat_id: str) -> Dict[str, Any]:
        """``{name, type, chat_id}`` of a chat."""

    async def edit_message(self, chat_id: str, message_id: str, content: str, *, finalize: bool = False) -> SendResult:
        return SendResult(success=False, error="Not supported")

    async def delete_message(self, chat_id: str, message_id: str) -> bool:
        return False

    async def send_typing(self, chat_id: str, metadata=None) -> None:
        return None

    async def stop_typing(self, chat_id: str) -> None:
        return None

    async def send_image(self, chat_id: str, image_url: str, caption: Optional[str] = None,
                         reply_to: Optional[str] = None, metadata: Optional[Dict[str, Any]] = None) -> SendResult:
        text = f"{caption}\n{image_url}" if caption else image_url
        return await self.send(chat_id=chat_id, content=text, reply_to=reply_to)

    async def send_animation(self, chat_id: str, animation_url: str, caption: Optional[str] = None,
                             reply_to: Optional[str] = None, metadata: Optional[Dict[str, Any]] = None) -> SendResult:
        return await self.send_image(chat_id=chat_id, image_url=animation_url, caption=caption, reply_to=reply_to)

    async def send_voice(self, chat_id: str, audio_path: str, caption: Optional[str] = None,
                         reply_to: Optional[str] = None, **kwargs) -> SendResult:
        text = f"🔊 Audio: {audio_path}"
        return await self.send(chat_id=chat_id, content=f"{caption}\n{text}" if caption else text, reply_to=reply_to)

    async def send_video(self, chat_id: str, video_path: str, caption: Optional[str] = None,
                         reply_to: Optional[str] = None, **kwargs) -> SendResult:
        text = f"🎬 Video: {video_path}"
        return await self.send(chat_id=chat_id, content=f"{caption}\n{text}" if caption else text, reply_to=reply_to)

    async def send_document(self, chat_id: str, file_path: str, caption: Optional[str] = None,
                            file_name: Optional[str] = None, reply_to: Optional[str] = None, **kwargs) -> SendResult:
        text = f"📎 File: {file_path}"
        return await self.send(chat_id=chat_id, content=f"{caption}\n{text}" if caption else text, reply_to=reply_to)

    async def send_image_file(self, chat_id: str, image_path: str, caption: Optional[str] = None,
                              reply_to: Optional[str] = None, **kwargs) -> SendResult:
        text = f"🖼️ Image: {image_path}"
        return await self.send(chat_id=chat_id, content=f"{caption}\n{text}" if caption else text, reply_to=reply_to)

    @property
    def message_len_fn(self) -> Callable[[str], int]:
        """How a message's length is counted (``len``; Telegram counts UTF-16 units)."""
        return len

    def max_message_length_for_chat(self, chat_id: str) -> int:
        """The longest message for ``chat_id``, in ``message_len_fn_for_chat``
        units: ``MAX_MESSAGE_LENGTH`` (4096 when unset), as Hermes's default."""
        try:
            return int(getattr(self, "MAX_MESSAGE_LENGTH", 4096) or 4096)
        except (TypeError, ValueError):
            return 4096

    def message_len_fn_for_chat(self, chat_id: str) -> Callable[[str], int]:
        return self.message_len_fn

    def format_message(self, content: str) -> str:
        return content

    @staticmethod
    def truncate_message(content: str, max_length: int = 4096, len_fn=None) -> List[str]:
        """Split ``content`` into chunks of at most ``max_length`` (newline, then space boundaries)."""
        measure = len_fn or len
        if measure(content) <= max_length:
            return [content]
        chunks, rest = [], content
        while rest:
            if measure(rest) <= max_length:
                chunks.append(rest)
                break
            cut = rest[:max_length]
            at = cut.rfind("\n")
            if at < max_length // 2:
                at = cut.rfind(" ")
            if at < 1:
                at = max_length
            chunks.append(rest[:at].rstrip())
            rest = rest[at:].lstrip()
        return chunks

    def build_source(self, chat_id: str, chat_name: Optional[str] = None, chat_type: str = "dm",
                     user_id: Optional[str] = None, user_name: Optional[str] = None,
                     thread_id: Optional[str] = None, chat_topic: Optional[str] = None,
                     user_id_alt: Optional[str] = None, chat_id_alt: Optional[str] = None,
                     is_bot: bool = False, scope_id: Optional[str] = None,
                     guild_id: Optional[str] = None, parent_chat_id: Optional[str] = None,
                     message_id: Optional[str] = None, role_authorized: bool = False,
                     auto_thread_created: bool = False,
                     auto_thread_initial_name: Optional[str] = None) -> SessionSource:
        """Hermes's ``SessionSource`` of an inbound message on this platform
        (its keywords in Hermes's order)."""
        if chat_topic is not None and not chat_topic.strip():
            chat_topic = None
        return SessionSource(
            platform=self.platform, chat_id=str(chat_id), chat_name=chat_name, chat_type=chat_type,
            user_id=str(user_id) if user_id else None, user_name=user_name,
            thread_id=str(thread_id) if thread_id else None,
            chat_topic=chat_topic.strip() if chat_topic else None,
            user_id_alt=user_id_alt, chat_id_alt=chat_id_alt, is_bot=is_bot,
            guild_id=str(guild_id) if guild_id else None,
            parent_chat_id=str(parent_chat_id) if parent_chat_id else None,
            message_id=str(message_id) if message_id else None,
            scope_id=str(scope_id) if scope_id else None,
            role_authorized=role_authorized, auto_thread_created=auto_thread_created,
            auto_thread_initial_name=auto_thread_initial_name,
        )

    # -- inbound -------------------------------------------------------
    async def handle_message(self, event: MessageEvent) -> None:
        """Hand an incoming message to the gateway and return at once; the
        gateway queues it per chat and answers through :meth:`send`."""
        handler = self._message_handler
        if not handler:
            return
        result = handler(event)
        if asyncio.iscoroutine(result):
            await result

    def has_pending_interrupt(self, session_key: str) -> bool:
        return False

    def get_pending_message(self, session_key: str) -> Optional[MessageEvent]:
        return self._pending_messages.pop(session_key, None)

    async def cancel_background_tasks(self) -> None:
        for task in list(self._background_tasks):
            task.cancel()
        self._background_tasks.clear()

    async def interrupt_session_activity(self, session_key: str, chat_id: str) -> None:
        return None

    # -- outbound ------------------------------------------------------
    async def _send_with_retry(self, chat_id: str, content: str, reply_to: Optional[str] = None,
                               metadata: Optional[Dict[str, Any]] = None, max_retries: int = 2,
                               base_delay: float = 0.5) -> SendResult:
        """``send``, retried on a transient connection failure (Hermes's rule)."""
        result = None
        for attempt in range(max_retries + 1):
            try:
                result = await self.send(chat_id=chat_id, content=content, reply_to=reply_to, metadata=metadata)
            except Exception as e:  # an adapter that raises is a failed send
                result = SendResult(success=False, error=f"{type(e).__name__}: {e}")
            if result is None:
                return SendResult(success=False, error="send returned None")
            if getattr(result, "success", False):
                return result
            error = (getattr(result, "error", "") or "").lower()
            retryable = getattr(result, "retryable", False) or any(p in error for p in _RETRYABLE_ERROR_PATTERNS)
            if not retryable or attempt == max_retries:
                return result
            await asyncio.sleep(base_delay * (2 ** attempt))
        return result


def _plughost_attach(adapter, push, fatal, platform_event=None) -> None:
    """Wire ``adapter`` to plughost's gateway: inbound messages go to
    ``push(wire)`` (a plain dict of the event), a fatal error to
    ``fatal(code, message, retryable)``, a platform event (a reaction, an
    edit) to ``platform_event(event)``."""
    from gateway.platforms.event import _plughost_wire

    async def _message_handler(event):
        wire = _plughost_wire(event)
        extra = getattr(adapter.config, "extra", None) or {}
        wire["session_key"] = build_session_key(
            event.source or SessionSource(),
            group_sessions_per_user=extra.get("group_sessions_per_user", True),
            thread_sessions_per_user=extra.get("thread_sessions_per_user", False),
        )
        push(wire)
        return None

    def _fatal_handler(a):
        fatal(a.fatal_error_code or "fatal", a.fatal_error_message or "the adapter stopped", bool(a.fatal_error_retryable))

    async def _platform_event_handler(event, source=None):
        # As Hermes's runner: a malformed event is dropped; nothing an
        # observer does reaches the adapter's loop.
        if not isinstance(event, dict) or not event.get("event_type"):
            logger.debug("plughost gateway: a malformed platform event was dropped: %r", event)
            return None
        try:
            platform_event(dict(event))
        except Exception:
            logger.debug("plughost gateway: a platform event was not delivered", exc_info=True)
        return None

    adapter.set_message_handler(_message_handler)
    adapter.set_fatal_error_handler(_fatal_handler)
    if platform_event is not None:
        adapter.set_platform_event_handler(_platform_event_handler)


async def _plughost_send(adapter, chat_id, content, reply_to=None, metadata=None):
    """``(ok, message_id, error)`` of sending ``content`` through ``adapter``
    (formatted and split as the adapter asks, retried as Hermes retries)."""
    text = adapter.format_message(content) if content else content
    limit = int(getattr(adapter, "MAX_MESSAGE_LENGTH", 0) or 0)
    chunks = adapter.truncate_message(text, limit) if limit and text else [text]
    first_id, error = None, None
    for i, chunk in enumerate(chunks):
        result = await adapter._send_with_retry(chat_id=chat_id, content=chunk,
                                                reply_to=reply_to if i == 0 else None, metadata=metadata)
        if not getattr(result, "success", False):
            error = getattr(result, "error", None) or "send failed"
            return (False, first_id, error)
        if first_id is None:
            first_id = getattr(result, "message_id", None)
    return (True, None if first_id is None else str(first_id), None)


async def _plughost_edit(adapter, chat_id, message_id, content, finalize=False):
    """``(ok, error)`` of editing a sent message through ``adapter``."""
    try:
        result = await adapter.edit_message(chat_id, message_id, content, finalize=finalize)
    except TypeError:
        result = await adapter.edit_message(chat_id, message_id, content)
    except Exception as e:
        return (False, f"{type(e).__name__}: {e}")
    return (bool(getattr(result, "success", False)), getattr(result, "error", None))
