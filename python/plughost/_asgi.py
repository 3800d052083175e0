"""plughost's ASGI server half (``_plughost_asgi``): runs a plugin's ASGI
application (Felix's FastAPI app) on plughost's asyncio loop for requests
axum received. The Rust side (``runtime/asgi.rs``) hands each request in
with the body as far as it has arrived, an :class:`Inbox` it feeds the
rest of the body into as it comes (``None`` when the body was whole), and
an ``emit`` callable that forwards the response's messages to the client as
they come; cancelling the task (a client that went away) cancels the
application's handling.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import threading
import time

ASGI = {"version": "3.0", "spec_version": "2.3"}


def scope(method, path, query, headers, client, server) -> dict:
    """An HTTP connection scope, as uvicorn builds it."""
    return {
        "type": "http",
        "asgi": ASGI,
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": [(name.lower().encode("latin-1"), bytes(value)) for name, value in headers],
        "client": client,
        "server": server,
        "state": {},
    }


class Inbox:
    """The rest of a streamed request body. Rust's side ``put``s each
    chunk from a tokio thread as ``(bytes, more)``, or ``None`` for a body
    cut short (a client gone, a body over the limit); the application's
    ``receive()`` takes them in order and calls ``pull`` for each one taken,
    which lets Rust read one more chunk from the client (back-pressure: a
    slow application never has a whole upload buffered)."""

    def __init__(self, pull) -> None:
        self._lock = threading.Lock()
        self._items: "collections.deque" = collections.deque()
        self._waiter: "asyncio.Future | None" = None
        self._pull = pull

    def put(self, item) -> None:
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    async def get(self):
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    break
                waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
        self._pull()
        return item


class Outbox:
    """Room for the response body: ``send`` of a body chunk ``take``s one
    place, and Rust's side ``give``s one back (from a tokio thread) each
    time the client's connection took a chunk. A client that stops reading
    thus stalls the application's ``send`` — a streaming generator stops
    producing — instead of the server buffering its answer without end."""

    def __init__(self, room: int) -> None:
        self._lock = threading.Lock()
        self._room = room
        self._gone = False
        self._waiter: "asyncio.Future | None" = None
        self._gone_waiter: "asyncio.Future | None" = None

    def give(self) -> None:
        with self._lock:
            self._room += 1
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    def disconnect(self) -> None:
        """The client went away: ``gone()`` returns, ``take()`` waits for good
        (until the task is cancelled)."""
        with self._lock:
            self._gone = True
            waiters, self._waiter, self._gone_waiter = (self._waiter, self._gone_waiter), None, None
        for waiter in waiters:
            if waiter is not None:
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    async def take(self) -> None:
        while True:
            with self._lock:
                if self._gone:
                    waiter = None
                elif self._room > 0:
                    self._room -= 1
                    return
                else:
                    waiter = self._waiter = asyncio.get_running_loop().create_future()
            if waiter is None:
                await asyncio.get_running_loop().create_future()
            await waiter

    async def gone(self) -> None:
        while True:
            with self._lock:
                if self._gone:
                    return
                waiter = self._gone_waiter = asyncio.get_running_loop().create_future()
            await waiter


_last_collect = 0.0


def _collect_after_disconnect() -> None:
    """A response whose client went away ended by cancellation (Starlette's
    streaming response cancels its producer): what it held — the
    plugin's async generator among it — is in reference cycles through the
    cancellation's traceback, and the generator's ``finally`` would run
    only whenever the cycle collector next comes by. Collect now, at most
    once a second, so a storm of disconnects costs one collection a second."""
    global _last_collect
    now = time.monotonic()
    if now - _last_collect >= 1.0:
        _last_collect = now
        gc.collect()


def _wake(waiter: "asyncio.Future") -> None:
    if not waiter.done():
        waiter.set_result(None)


async def http(app, connection: dict, body: bytes, inbox: "Inbox | None", emit, outbox: "Outbox | None" = None) -> None:
    """Run one request through ``app``; ``emit`` gets ``("start", status,
    headers)`` then ``("body", bytes, more)`` messages, each body message
    but the last only once ``outbox`` has room for it."""
    delivered = False
    ended = inbox is None
    cut = False

    async def receive():
        nonlocal delivered, ended, cut
        if cut:
            return {"type": "http.disconnect"}
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": not ended}
        if not ended:
            item = await inbox.get()
            if item is None:
                ended = cut = True
                return {"type": "http.disconnect"}
            chunk, more = item
            ended = not more
            return {"type": "http.request", "body": chunk, "more_body": more}
        if outbox is not None:
            # Until the client goes away (as uvicorn tells it).
            await outbox.gone()
            return {"type": "http.disconnect"}
        # The client is still there until the task is cancelled.
        await asyncio.get_running_loop().create_future()

    async def send(message):
        kind = message["type"]
        if kind == "http.response.start":
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers") or ()]
            emit(("start", int(message["status"]), headers))
        elif kind == "http.response.body":
            more = bool(message.get("more_body", False))
            if more and outbox is not None:
                await outbox.take()
            emit(("body", bytes(message.get("body") or b""), more))

    try:
        await app(connection, receive, send)
    finally:
        if outbox is not None and outbox._gone:
            _collect_after_disconnect()


class Lifespan:
    """The ASGI lifespan protocol, as uvicorn drives it: ``startup`` sends
    ``lifespan.startup`` and waits for its answer; ``shutdown`` likewise.
    An application that raises on a lifespan scope has none."""

    def __init__(self, app) -> None:
        self.app = app
        self.queue: "asyncio.Queue | None" = None
        self.started: "asyncio.Future | None" = None
        self.stopped: "asyncio.Future | None" = None
        self.task = None
        self.supported = True

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self.queue = asyncio.Queue()
        self.started = loop.create_future()
        self.stopped = loop.create_future()
        self.task = loop.create_task(self._main())
        await self.queue.put({"type": "lifespan.startup"})
        await self.started

    async def _main(self) -> None:
        async def receive():
            return await self.queue.get()

        async def send(message):
            kind = message["type"]
            if kind == "lifespan.startup.complete":
                self.started.set_result(None)
            elif kind == "lifespan.startup.failed":
                self.started.set_exception(RuntimeError(message.get("message") or "lifespan startup failed"))
            elif kind == "lifespan.shutdown.complete":
                self.stopped.set_result(None)
            elif kind == "lifespan.shutdown.failed":
                self.stopped.set_exception(RuntimeError(message.get("message") or "lifespan shutdown failed"))

        try:
            await self.app({"type": "lifespan", "asgi": ASGI, "state": {}}, receive, send)
        except BaseException as exc:
            if not self.started.done():
                # No lifespan support (uvicorn's "auto" mode goes on).
                self.supported = False
                self.started.set_result(None)
            elif not self.stopped.done():
                self.stopped.set_exception(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise

    async def shutdown(self) -> None:
        if not self.supported or self.task is None or self.task.done():
            return
        await self.queue.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(asyncio.shield(self.stopped), 10)
