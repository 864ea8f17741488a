"""One DevTools protocol connection over a browser's ``--remote-debugging-pipe``.

The browser reads commands on its fd 3 and writes answers and events on its fd 4, each message
one JSON object followed by a NUL byte; its holder (``holder.py``) carries those bytes as they
are over a Unix socket. :class:`Framer` is the pure part (bytes in, messages out);
:class:`CdpConnection` drives it over the holder's socket with asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any, Final

import orjson

from wire import jsontext
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

NUL: Final = b"\0"
# A message larger than this (a full-page screenshot is a few MB) closes the connection.
MAX_MESSAGE: Final = 64 * 1024 * 1024
Listener = Callable[[str, dict[str, Any], str | None], None]


class CdpError(OpError):
    """The browser refused a command (its ``error`` answer)."""

    def __init__(self, method: str, message: str) -> None:
        super().__init__(ErrorCode.ACTION_FAILED, f"{method}: {message}")
        self.cdp_message = message


class Framer:
    """NUL-terminated JSON messages from a byte stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # no NUL before this offset of the buffer

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The complete messages ``data`` finishes; malformed ones are dropped."""
        self._buffer += data
        messages: list[dict[str, Any]] = []
        while (end := self._buffer.find(NUL, self._scanned)) >= 0:
            raw = self._buffer[:end]
            del self._buffer[: end + 1]
            self._scanned = 0
            with contextlib.suppress(ValueError):
                message = _parse(raw)
                if isinstance(message, dict):
                    messages.append(message)
        self._scanned = len(self._buffer)
        if len(self._buffer) > MAX_MESSAGE:
            raise OpError(ErrorCode.PROTOCOL_ERROR, "a DevTools message is too large")
        return messages


def _parse(raw: bytearray) -> Any:
    """One message's JSON: orjson (a whole page's tree, ~600 KB, in 3 ms rather than 5), or the
    standard library for what orjson refuses and the browser writes: a string with a lone
    surrogate (JavaScript strings may hold one; the browser escapes it as ``\\udXXX``)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def encode(message: dict[str, Any]) -> bytes:
    """One message as the browser reads it."""
    return jsontext.dumps(message) + NUL


class CdpConnection:
    """Commands and events on a browser's DevTools pipe; ``closed`` once it is gone."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._framer = Framer()
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._listeners: list[Listener] = []
        # Commands sent for a proxied client (relay/browser/endpoint.py): id → its answer's taker.
        self._forwards: dict[int, Callable[[dict[str, Any]], None]] = {}
        self._taps: list[Callable[[dict[str, Any]], None]] = []
        self.closed = False
        self._reading = asyncio.get_running_loop().create_task(self._read(), name="devtools")

    @classmethod
    async def connect(cls, path: str) -> CdpConnection:
        """Connect to a browser's holder; ``OSError`` when nothing serves there."""
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while data := await self._reader.read(1 << 20):
                self.received(data)
        except OSError:
            pass
        finally:
            self.close()

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Hear every event (method, params, session id); returns how to stop hearing."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def tap(self, taker: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Hear every event as the browser sent it; returns how to stop hearing."""
        self._taps.append(taker)
        return lambda: self._taps.remove(taker) if taker in self._taps else None

    def forward(self, message: dict[str, Any], taker: Callable[[dict[str, Any]], None]) -> int:
        """Send a client's ``message`` under an id of this connection (returned); its answer,
        as the browser sent it, goes to ``taker``."""
        if self.closed:
            raise OpError(ErrorCode.UNAVAILABLE, "the browser has closed")
        message_id = next(self._ids)
        self._forwards[message_id] = taker
        self._writer.write(encode({**message, "id": message_id}))
        return message_id

    def unforward(self, message_id: int) -> None:
        self._forwards.pop(message_id, None)

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session_id: str | None = None,
        timeout_s: float = 10.0,
    ) -> dict[str, Any]:
        """Send one command and await its answer; the browser's error is :class:`CdpError`."""
        if self.closed:
            raise OpError(ErrorCode.UNAVAILABLE, "the browser has closed")
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = (method, future)
        try:
            self._writer.write(encode(message))
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            raise OpError(ErrorCode.TIMEOUT, f"the browser did not answer {method}") from None
        finally:
            self._pending.pop(message_id, None)

    def received(self, data: bytes) -> None:
        try:
            messages = self._framer.feed(data)
        except OpError:
            logger.warning("closing a DevTools pipe: a message over the size limit")
            self.close()
            return
        for message in messages:
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        message_id = message.get("id")
        if isinstance(message_id, int) and message_id in self._forwards:
            self._forwards.pop(message_id)(message)
            return
        if isinstance(message_id, int):
            method, future = self._pending.get(message_id, ("", None))
            if future is None or future.done():
                return
            error = message.get("error")
            if isinstance(error, dict):
                future.set_exception(CdpError(method, str(error.get("message", "error"))))
            else:
                result = message.get("result")
                future.set_result(result if isinstance(result, dict) else {})
            return
        event = message.get("method")
        for taker in list(self._taps):
            try:
                taker(message)
            except Exception:
                logger.exception("DevTools tap failed")
        if isinstance(event, str):
            params = message.get("params")
            session = message.get("sessionId")
            for listener in list(self._listeners):
                try:
                    listener(event, params if isinstance(params, dict) else {}, session)
                except Exception:  # a listener's bug must not stop the reader
                    logger.exception("DevTools event listener failed")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._writer.close()
        if asyncio.current_task() is not self._reading:
            self._reading.cancel()
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(OpError(ErrorCode.UNAVAILABLE, "the browser has closed"))
        self._pending.clear()
        self._forwards.clear()
        for taker in list(self._taps):
            with contextlib.suppress(Exception):
                taker({"method": "Inspector.detached", "params": {"reason": "closed"}})
        self._taps.clear()
