"""Relay end of a channel: bytes between the server and a loopback TCP target.

Each direction has its own task. Bytes from the server are written in wire order and credit is
returned only once the target socket has taken them, so a slow target holds at most one window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from wire.errors import ChannelCloseCode
from wire.ids import ChannelId

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
# Says why the target hung up (e.g. "desktop stopped" when its desktop is going away).
TargetEnd = Callable[[], Awaitable[tuple[ChannelCloseCode, str]]]


async def _target_closed() -> tuple[ChannelCloseCode, str]:
    return ChannelCloseCode.TARGET_CLOSED, "target closed the connection"


class TcpChannel:
    """Pumps one channel to and from a TCP stream."""

    def __init__(
        self,
        channel_id: ChannelId,
        link: ServerLink,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        target_end: TargetEnd = _target_closed,
    ) -> None:
        self.channel_id = channel_id
        self._target_end = target_end
        self._link = link
        self._reader = reader
        self._writer = writer
        self._inbox: deque[bytes] = deque()
        self._inbox_ready = asyncio.Event()
        self._credit = asyncio.Event()
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._upstream(), name=f"channel-{self.channel_id}-up"),
            asyncio.create_task(self._downstream(), name=f"channel-{self.channel_id}-down"),
        ]

    def feed(self, payload: bytes) -> None:
        self._inbox.append(payload)
        self._inbox_ready.set()

    def credit_arrived(self) -> None:
        self._credit.set()

    async def _upstream(self) -> None:
        """Target → server, limited by the credit the server grants."""
        try:
            while data := await self._reader.read(READ_CHUNK):
                await self._send(data)
        except (ConnectionError, OSError):
            pass
        if not self._closed:
            await self.close(*await self._target_end())

    async def _send(self, data: bytes) -> None:
        view = memoryview(data)
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
                self._writer.write(payload)
                await self._writer.drain()
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
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
