import asyncio, contextlib, itertools, json, logging, os

from gateway.platforms.base import BasePlatformAdapter, SendResult
from gateway.platforms.event import MessageEvent, MessageType
from gateway.platforms.helpers import cancel_task
from gateway.config import Platform

logger = logging.getLogger(__name__)


class FakeChatAdapter(BasePlatformAdapter):
    def __init__(self, config, **kwargs):
        super().__init__(config=config, platform=Platform("fakechat"))
        extra = getattr(config, "extra", {}) or {}
        self.port = int(os.getenv("FAKECHAT_PORT") or extra.get("port") or 0)
        self._reader = None
        self._writer = None
        self._recv_task = None
        self._acks = {}
        self._req = itertools.count(1)

    async def connect(self) -> bool:
        try:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError as e:
            self._set_fatal_error("connect_failed", str(e), retryable=True)
            return False
        await self._write({"op": "hello", "pid": os.getpid()})
        self._recv_task = asyncio.create_task(self._receive_loop())
        self._mark_connected()
        return True

    async def disconnect(self) -> None:
        self._mark_disconnected()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        await cancel_task(self._recv_task)
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(ConnectionError("disconnected"))
        self._acks.clear()
        self._writer = None

    async def _write(self, obj):
        self._writer.write((json.dumps(obj) + "\n").encode())
        await self._writer.drain()

    async def _request(self, obj):
        req = next(self._req)
        fut = asyncio.get_running_loop().create_future()
        self._acks[req] = fut
        obj["req"] = req
        await self._write(obj)
        return await asyncio.wait_for(fut, 20)

    async def send(self, chat_id, content, reply_to=None, metadata=None):
        if self._writer is None:
            return SendResult(success=False, error="Not connected")
        try:
            ack = await self._request({"op": "send", "chat_id": chat_id, "text": content, "reply_to": reply_to})
        except Exception as e:
            return SendResult(success=False, error=str(e))
        return SendResult(success=True, message_id=ack["message_id"])

    async def edit_message(self, chat_id, message_id, content, *, finalize=False):
        if self._writer is None:
            return SendResult(success=False, error="Not connected")
        ack = await self._request({"op": "edit", "chat_id": chat_id, "message_id": message_id, "text": content})
        return SendResult(success=bool(ack.get("ok")), message_id=message_id)

    async def get_chat_info(self, chat_id):
        return {"name": chat_id, "type": "dm", "chat_id": chat_id}

    async def _receive_loop(self):
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                msg = json.loads(line)
                if msg["op"] == "ack":
                    fut = self._acks.pop(msg["req"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                elif msg["op"] == "msg":
                    source = self.build_source(chat_id=msg["chat_id"], chat_type=msg.get("chat_type", "dm"),
                                               user_id=msg["user"], user_name=msg["user"])
                    await self.handle_message(MessageEvent(text=msg["text"], message_type=MessageType.TEXT,
                                                           source=source, message_id=msg["id"]))
                elif msg["op"] == "react":
                    # As Hermes's Telegram adapter reports a reaction.
                    handler = getattr(self, "_platform_event_handler", None)
                    if handler is not None:
                        source = self.build_source(chat_id=msg["chat_id"], chat_type="dm",
                                                   user_id=msg["user"], user_name=msg["user"])
                        if msg["emoji"] == "malformed":
                            # What a buggy adapter might hand over: not a
                            # dict, then a dict without an event type.
                            await handler("not a dict", source)
                            await handler({"platform": "fakechat"}, source)
                        payload = {"chat_id": msg["chat_id"], "message_id": msg["message_id"],
                                   "emojis": [msg["emoji"]], "custom_emoji_ids": [], "thread_id": None}
                        await handler({"platform": "fakechat", "event_type": "reaction",
                                       "payload": payload}, source)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.error("fakechat: receive loop error: %s", e)
        finally:
            if self.is_connected:
                self._set_fatal_error("connection_lost", "fakechat connection closed unexpectedly", retryable=True)
                await self._notify_fatal_error()


def check_requirements() -> bool:
    return True
