"""A relay channel seen from the server: an ordered byte stream with a credit window."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import Any

from wire.errors import ChannelCloseCode, ChannelClosedError
from wire.frames import Payload
from wire.ids import ChannelId
from wire.link import Link

_channel_ids = itertools.count(1)

# The window starts at the connection's (1 MiB) and grows, 1 MiB at a time, up to this, but
# only for a consumer that drained a whole window and is waiting again: like TCP autotuning,
# a fast viewer gets the bandwidth-delay product it needs and a slow one never grows. Credit
# goes back in quarter-window batches, so a grown window also means fewer credit frames.
MAX_WINDOW = 8 * 1024 * 1024
WINDOW_STEP = 1024 * 1024


class ServerChannel:
    """Bytes to and from one relay-side target (a VNC stream, audio).

    Received bytes are buffered only up to the credit window the relay was granted, so the
    buffer is bounded whatever the consumer's speed: credit is returned when :meth:`read`
    hands bytes to the consumer.
    """

    def __init__(self, channel_id: ChannelId, link: Link) -> None:
        self.channel_id = channel_id
        self._link = link
        self._inbox: deque[Payload] = deque()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._closed: ChannelClosedError | None = None
        self.window = link.connection.window
        self._since_growth = 0

    def feed(self, payload: Payload) -> None:
        self._inbox.append(payload)
        self._since_growth += len(payload)
        self._readable.set()

    def _grow_window(self) -> bool:
        """Grant the relay one more step of credit if the window, not the source, limits us."""
        if self._since_growth < self.window or self.window >= MAX_WINDOW:
            return False
        grown = self._link.connection.grow_window(self.channel_id, WINDOW_STEP)
        if not grown:
            return False
        self.window, self._since_growth = grown, 0
        return True

    def credit_arrived(self) -> None:
        self._writable.set()

    @property
    def buffered(self) -> int:
        """Received bytes not yet read (at most :attr:`window`)."""
        return sum(len(chunk) for chunk in self._inbox)

    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    async def read(self) -> Payload:
        """Next chunk of bytes; raise :class:`ChannelClosedError` once closed and drained."""
        while not self._inbox:
            if self._closed is not None:
                raise self._closed
            if self._grow_window():
                await self._link.flush()
            self._readable.clear()
            await self._readable.wait()
        payload = self._inbox.popleft()
        self._link.connection.consumed(self.channel_id, len(payload))
        await self._link.flush()
        return payload

    async def write(self, data: Payload) -> None:
        """Send ``data``, waiting for credit whenever the window is used up."""
        view = memoryview(data)
        while view:
            if self._closed is not None:
                raise self._closed
            taken = self._link.connection.send_data(self.channel_id, view)
            if taken:
                view = view[taken:]
                await self._link.flush()
                continue
            self._writable.clear()
            await self._writable.wait()

    async def close(
        self,
        code: ChannelCloseCode = ChannelCloseCode.NORMAL,
        reason: str = "",
        *,
        tell_peer: bool = True,
    ) -> None:
        """Close (idempotent); tell the relay unless it closed the channel itself."""
        if self._closed is None:
            self._closed = ChannelClosedError(code, reason)
        self._readable.set()
        self._writable.set()
        self._link.forget_channel(self.channel_id)
        if tell_peer and self._link.connection.close_channel(self.channel_id, code, reason):
            try:
                await self._link.flush()
            except Exception:  # the relay is gone: nothing left to tell it
                return


async def open_channel(
    link: Link, op: str, args: dict[str, Any], timeout_s: float
) -> ServerChannel:
    """Open a channel on ``link`` with request ``op`` (``args`` plus the new ``channel_id``);
    the peer connects it before it answers. Frames the peer sends first are already routed."""
    channel_id = ChannelId(next(_channel_ids) & 0xFFFFFFFF)
    channel = ServerChannel(channel_id, link)
    link.add_channel(channel)
    try:
        await link.request(op, {**args, "channel_id": channel_id}, timeout_s)
    except BaseException:
        link.forget_channel(channel_id)
        link.connection.close_channel(channel_id, ChannelCloseCode.ERROR, "open failed")
        await link.flush_quietly()
        raise
    return channel
