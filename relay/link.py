"""Relay end of the server connection: drives :class:`wire.connection.Connection`.

Requests from the server run in a bounded pool of tasks (one per request, at most
``max_concurrency`` at once); channel frames never enter that pool: they are handed to their
channel in wire order by the receive loop itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from relay.wsframes import HEADROOM, FrameWriter
from wire.connection import (
    CancelReceived,
    ChannelClosed,
    ChannelCredit,
    ChannelData,
    Connection,
    Notice,
    RequestReceived,
    ResponseReceived,
    WireEvent,
)
from wire.errors import ChannelCloseCode, ErrorCode, OpError
from wire.frames import HEADER, Payload
from wire.ids import ChannelId, RequestId
from wire.messages import Request

log = logging.getLogger(__name__)

SendFrame = Callable[[str | bytes], Awaitable[None]]
Dispatch = Callable[["ServerLink", Request], Awaitable[Any]]


class LinkChannel(Protocol):
    """A relay channel end (``relay.channels.TcpChannel``, ``relay.audio.AudioChannel``)."""

    channel_id: ChannelId

    def start(self) -> None: ...

    def feed(self, payload: Payload) -> None: ...

    def credit_arrived(self) -> None: ...

    async def close(
        self, code: ChannelCloseCode, reason: str, *, tell_peer: bool = True
    ) -> None: ...


class ServerLink:
    """One live connection to the server, seen from the relay."""

    def __init__(
        self,
        connection: Connection,
        send: SendFrame,
        dispatch: Dispatch,
        max_concurrency: int,
        frames: FrameWriter | None = None,
    ) -> None:
        self.connection = connection
        self._send = send
        self._frames = frames
        self._dispatch = dispatch
        self._pool = asyncio.Semaphore(max_concurrency)
        self._write_lock = asyncio.Lock()
        self._requests: dict[RequestId, asyncio.Task[None]] = {}
        self._channels: dict[ChannelId, LinkChannel] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.closed = False

    async def flush(self) -> None:
        """Write every frame the connection has queued, in order."""
        async with self._write_lock:
            for frame in self.connection.data_to_send():
                await self._send(frame)

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
        if self.closed:
            return
        self.connection.send_event(name, data)
        await self.flush()

    def add_channel(self, channel: LinkChannel) -> None:
        self.connection.open_channel(channel.channel_id)
        self._channels[channel.channel_id] = channel
        channel.start()

    def forget_channel(self, channel_id: ChannelId) -> None:
        self._channels.pop(channel_id, None)

    @property
    def open_channels(self) -> int:
        return len(self._channels)

    async def handle(self, events: list[WireEvent]) -> None:
        for event in events:
            self._handle_one(event)
        await self.flush()

    def _handle_one(self, event: WireEvent) -> None:
        match event:
            case RequestReceived(request):
                task = asyncio.create_task(self._answer(request), name=f"op-{request.op}")
                self._requests[request.id] = task
            case CancelReceived(request_id):
                if pending := self._requests.pop(request_id, None):
                    pending.cancel()
            case ChannelData(channel_id, payload):
                if channel := self._channels.get(channel_id):
                    channel.feed(payload)
            case ChannelCredit(channel_id, _):
                if channel := self._channels.get(channel_id):
                    channel.credit_arrived()
            case ChannelClosed(channel_id, code, reason, by_peer):
                if channel := self._channels.get(channel_id):
                    self._spawn_close(channel, code, reason, tell_peer=not by_peer)
            case ResponseReceived() | Notice():
                log.info("server: %s", event)
            case _:
                log.warning("unexpected event from server: %s", type(event).__name__)

    def _spawn_close(
        self, channel: LinkChannel, code: ChannelCloseCode, reason: str, *, tell_peer: bool
    ) -> None:
        task = asyncio.create_task(channel.close(code, reason, tell_peer=tell_peer))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _answer(self, request: Request) -> None:
        try:
            async with self._pool, asyncio.timeout(request.timeout_ms / 1000):
                result = await self._dispatch(self, request)
        except OpError as err:
            self.connection.send_error(request.id, err)
        except TimeoutError:
            message = f"{request.op} did not finish within {request.timeout_ms} ms"
            self.connection.send_error(request.id, OpError(ErrorCode.TIMEOUT, message))
        except asyncio.CancelledError:
            self.connection.send_error(request.id, OpError(ErrorCode.CANCELLED))
            return
        except Exception:
            log.exception("op %s failed", request.op)
            self.connection.send_error(request.id, OpError(ErrorCode.INTERNAL, "internal error"))
        else:
            self.connection.send_result(request.id, result)
        finally:
            self._requests.pop(request.id, None)
        if not self.closed:
            try:
                await self.flush()
            except Exception:
                log.debug("could not send the answer to %s", request.op, exc_info=True)

    async def shutdown(self) -> None:
        """The connection is gone: cancel requests and close channels."""
        self.closed = True
        tasks = [*self._requests.values(), *self._background]
        for channel in list(self._channels.values()):
            tasks.append(
                asyncio.create_task(
                    channel.close(ChannelCloseCode.RELAY_GONE, "connection lost", tell_peer=False)
                )
            )
        self._channels.clear()
        for task in self._requests.values():
            task.cancel()
        self._requests.clear()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
