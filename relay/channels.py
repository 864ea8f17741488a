"""Relay end of a channel: bytes between the server and a byte stream.

A channel carries any :class:`ByteStream`: a loopback TCP connection (:class:`TargetStream`,
e.g. a desktop's x11vnc behind ``relay.vnc_target``) or a host helper's WebSocket stream
(``relay.local_desktop.HelperStream``).

Each direction has its own task. Bytes from the server are written in wire order and credit is
returned only once the target has taken them, so a slow target holds at most one window.
Bytes from the target are read straight into buffers that keep :data:`HEADROOM` free bytes in
front of the data (:class:`TargetStream` is a buffered protocol), so the link can turn a chunk
into its DATA frame, and its WebSocket frame, where it lies: the channel's bytes are never
copied in the relay's own memory (:meth:`relay.link.ServerLink.send_chunk`). The stream stops
reading the socket while more than :data:`HIGH_WATER` bytes wait for credit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from relay.wsframes import HEADROOM
from wire.connection import DEFAULT_WINDOW
from wire.errors import ChannelCloseCode
from wire.frames import Payload
from wire.ids import ChannelId

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

# Received from the target and not yet sent: reading pauses above this (a viewer that stops
# reading thus holds one credit window on the server and at most this much here).
HIGH_WATER = 256 * 1024
# A chunk's capacity: as much as one read may return. Three quarters of the initial window, the
# most a chunk may hold and still always go out as one frame where it lies
# (``Connection.whole_frame_possible``); fewer, larger frames cost the relay and the server less
# CPU per byte than 256 KiB ones (docs/viewing.md).
READ_SIZE = DEFAULT_WINDOW * 3 // 4
# Bytes read from a target after HEADROOM free bytes; writable, and used once.
Chunk = bytearray | memoryview
# Says why the target hung up (e.g. "desktop stopped" when its desktop is going away).
TargetEnd = Callable[[], Awaitable[tuple[ChannelCloseCode, str]]]


class ByteStream(Protocol):
    """What a channel pumps: chunks in (each after :data:`HEADROOM` free bytes), bytes out."""

    async def read(self) -> Chunk:
        """The next chunk (data after :data:`HEADROOM`); empty once the stream ended."""
        ...

    async def write(self, data: Payload) -> None:
        """Write ``data``; raises ``ConnectionError`` once the stream is gone."""
        ...

    async def aclose(self) -> None: ...


async def _target_closed() -> tuple[ChannelCloseCode, str]:
    return ChannelCloseCode.TARGET_CLOSED, "target closed the connection"


class TargetStream(asyncio.BufferedProtocol):
    """A TCP connection read chunk by chunk, with flow control both ways.

    A :data:`Chunk` is :data:`HEADROOM` free bytes, then the bytes read.
    """

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._filling: memoryview | None = None
        self._chunks: deque[Chunk] = deque()
        self._buffered = 0
        self._reading_paused = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._lost = asyncio.Event()
        self._eof = False

    @classmethod
    async def connect(cls, host: str, port: int) -> TargetStream:
        loop = asyncio.get_running_loop()
        _, stream = await loop.create_connection(cls, host, port)
        return stream

    # -- protocol callbacks --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._filling is None:  # the last one became a chunk
            # Uninitialised memory: the read overwrites it (a bytearray would be zeroed first).
            self._filling = np.empty(HEADROOM + READ_SIZE, dtype=np.uint8).data
        return self._filling[HEADROOM:]

    def buffer_updated(self, nbytes: int) -> None:
        filling = cast(memoryview, self._filling)
        chunk: Chunk
        if nbytes < READ_SIZE // 4:
            # A small read is copied into a buffer of its size (many of them then hold
            # little) and the read buffer is used again.
            chunk = bytearray(HEADROOM + nbytes)
            chunk[HEADROOM:] = filling[HEADROOM : HEADROOM + nbytes]
        else:
            chunk = filling[: HEADROOM + nbytes]
            self._filling = None
        self._chunks.append(chunk)
        self._buffered += nbytes
        if self._buffered >= HIGH_WATER and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()
        self._readable.set()

    def eof_received(self) -> bool:
        self._eof = True
        self._readable.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._readable.set()
        self._writable.set()
        self._lost.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- use -----------------------------------------------------------------------------------
    @property
    def hung_up(self) -> bool:
        """Whether the connection is gone (either end closed it)."""
        return self._lost.is_set()

    async def read(self) -> Chunk:
        """The next chunk the target sent (after :data:`HEADROOM`); empty once it hung up."""
        while not self._chunks:
            if self._eof:
                return bytearray()
            self._readable.clear()
            await self._readable.wait()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk) - HEADROOM
        if self._reading_paused and self._buffered < HIGH_WATER // 2 and self._transport:
            self._reading_paused = False
            self._transport.resume_reading()
        return chunk

    def push_received(self, data: bytes) -> None:
        """Queue ``data`` as if the target had sent it (bytes a handshake answers itself)."""
        if data:
            chunk = bytearray(HEADROOM + len(data))
            chunk[HEADROOM:] = data
            self._chunks.append(chunk)
            self._buffered += len(data)
            self._readable.set()

    async def write(self, data: Payload) -> None:
        """Write ``data``, waiting while the target's socket is above its high-water mark."""
        transport = self._transport
        if transport is None or transport.is_closing() or self._lost.is_set():
            raise ConnectionResetError("target connection closed")
        transport.write(data)
        await self._writable.wait()
        if self._lost.is_set():
            raise ConnectionResetError("target connection closed")

    async def aclose(self) -> None:
        if self._transport is not None:
            self._transport.close()
            await self._lost.wait()


class StreamChannel:
    """Pumps one channel to and from a :class:`ByteStream`."""

    def __init__(
        self,
        channel_id: ChannelId,
        link: ServerLink,
        target: ByteStream,
        target_end: TargetEnd = _target_closed,
    ) -> None:
        self.channel_id = channel_id
        self._target_end = target_end
        self._link = link
        self._target = target
        self._inbox: deque[Payload] = deque()
        self._inbox_ready = asyncio.Event()
        self._credit = asyncio.Event()
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._upstream(), name=f"channel-{self.channel_id}-up"),
            asyncio.create_task(self._downstream(), name=f"channel-{self.channel_id}-down"),
        ]

    def feed(self, payload: Payload) -> None:
        self._inbox.append(payload)
        self._inbox_ready.set()

    def credit_arrived(self) -> None:
        self._credit.set()

    async def _upstream(self) -> None:
        """Target → server, limited by the credit the server grants."""
        try:
            while chunk := await self._target.read():
                await self._send(chunk)
        except (ConnectionError, OSError):
            pass
        if not self._closed:
            await self.close(*await self._target_end())

    async def _send(self, chunk: Chunk) -> None:
        size = len(chunk) - HEADROOM
        if self._link.frames_in_place and self._link.connection.whole_frame_possible(size):
            # One frame built where the chunk lies, once the credit covers all of it.
            while not self._closed:
                self._credit.clear()
                if await self._link.send_chunk(self.channel_id, chunk):
                    return
                await self._credit.wait()
            return
        # Through the connection, copied into frames, as much as the credit allows at a time.
        view = memoryview(chunk)[HEADROOM:]
        while view and not self._closed:
            taken = self._link.connection.send_data(self.channel_id, view)
            if taken:
                view = view[taken:]
                await self._link.flush()
            else:
                self._credit.clear()
                await self._credit.wait()

    async def _downstream(self) -> None:
        """Server → target, in wire order; credit goes back after each drain."""
        try:
            while not self._closed:
                while not self._inbox:
                    self._inbox_ready.clear()
                    await self._inbox_ready.wait()
                    if self._closed:
                        return
                payload = self._inbox.popleft()
                await self._target.write(payload)
                self._link.connection.consumed(self.channel_id, len(payload))
                await self._link.flush()
        except (ConnectionError, OSError):
            await self.close(ChannelCloseCode.TARGET_CLOSED, "target closed the connection")

    async def close(self, code: ChannelCloseCode, reason: str, *, tell_peer: bool = True) -> None:
        """Close the target socket and (unless the peer closed first) the channel."""
        if self._closed:
            return
        self._closed = True
        self._inbox_ready.set()
        self._credit.set()
        self._link.forget_channel(self.channel_id)
        if tell_peer and self._link.connection.close_channel(self.channel_id, code, reason):
            with contextlib.suppress(Exception):
                await self._link.flush()
        with contextlib.suppress(Exception):
            await self._target.aclose()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()


class DesktopChannels:
    """The open stream channels of each desktop, so that a stop closes its viewers' channels
    ("desktop stopped") before it ends the desktop's processes: a viewer shows the desktop
    stopped at once, not once x11vnc has gone (docs/viewing.md)."""

    def __init__(self) -> None:
        self._by_desktop: dict[str, set[StreamChannel]] = {}

    def add(self, desktop_session_id: str, channel: StreamChannel) -> None:
        """Count ``channel`` as one of the desktop's (the closed ones are let go here)."""
        kept = {c for c in self._by_desktop.get(desktop_session_id, ()) if not c.closed}
        self._by_desktop[desktop_session_id] = kept | {channel}

    def count(self, desktop_session_id: str) -> int:
        """The desktop's channels still open."""
        return sum(not c.closed for c in self._by_desktop.get(desktop_session_id, ()))

    async def close_desktop(self, desktop_session_id: str) -> None:
        """Close every channel of a desktop that is going away, telling the server why."""
        channels = self._by_desktop.pop(desktop_session_id, set())
        await asyncio.gather(
            *(c.close(ChannelCloseCode.DESKTOP_STOPPED, "desktop stopped") for c in channels)
        )
