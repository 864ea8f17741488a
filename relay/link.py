"""Relay end of the server connection: the shared driver (``wire.link``) plus chunks framed in
place.

Requests from the server run in the driver's bounded pool (at most ``max_concurrency`` at once);
channel frames never enter that pool. :meth:`ServerLink.send_chunk` is the zero-copy path of a
channel's stream (``relay.wsframes``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from relay.wsframes import HEADROOM, FrameWriter
from wire.connection import Connection
from wire.frames import HEADER
from wire.ids import ChannelId
from wire.link import Link, LinkChannel, SendFrame
from wire.messages import Request

Dispatch = Callable[["ServerLink", Request], Awaitable[Any]]


class RelayChannel(LinkChannel, Protocol):
    """A relay channel end (``relay.channels.TcpChannel``, ``relay.audio.AudioChannel``)."""

    def start(self) -> None: ...


class ServerLink(Link):
    """One live connection to the server, seen from the relay."""

    peer: ClassVar[str] = "server"

    def __init__(
        self,
        connection: Connection,
        send: SendFrame,
        dispatch: Dispatch,
        max_concurrency: int,
        frames: FrameWriter | None = None,
    ) -> None:
        async def answer(request: Request) -> Any:
            return await dispatch(self, request)

        super().__init__(connection, send, on_request=answer, max_concurrency=max_concurrency)
        self._frames = frames

    @property
    def frames_in_place(self) -> bool:
        """Whether :meth:`send_chunk` can send (the connection frames chunks in place)."""
        return self._frames is not None

    async def send_chunk(self, channel_id: ChannelId, chunk: bytearray | memoryview) -> bool:
        """Send a target chunk (data after :data:`HEADROOM`) as one DATA frame, in place.

        False, and nothing sent, when the link cannot frame in place (:attr:`frames_in_place`)
        or the channel's credit does not cover the whole chunk yet.
        """
        if self._frames is None:
            return False
        async with self._write_lock:
            for frame in self.connection.data_to_send():
                await self._send(frame)
            if not self.connection.data_in_place(channel_id, chunk, HEADROOM):
                return False
            self._frames.write_binary(chunk, HEADROOM - HEADER.size)
        await self._frames.drain()
        return True

    async def send_event(self, name: str, data: dict[str, Any]) -> None:
        if self.closed.is_set():
            return
        self.connection.send_event(name, data)
        await self.flush()

    def start_channel(self, channel: RelayChannel) -> None:
        """Route ``channel``'s frames to it and start it."""
        self.add_channel(channel)
        channel.start()
