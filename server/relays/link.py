"""Server end of one relay connection: drives :class:`wire.connection.Connection`.

The link owns the pending-request futures and the channel objects; the protocol state lives in
the sans-I/O connection. ``send`` is a coroutine that writes one frame to the transport.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from server.relays.channel import ServerChannel
from wire.connection import (
    CancelReceived,
    ChannelClosed,
    ChannelCredit,
    ChannelData,
    Connection,
    EventReceived,
    Notice,
    RequestReceived,
    ResponseReceived,
    WireEvent,
)
from wire.errors import ChannelCloseCode, ErrorCode, OpError, RequestTimeout
from wire.ids import ChannelId, RelayId, RequestId
from wire.messages import Event, Request

log = logging.getLogger(__name__)

SendFrame = Callable[[str | bytes], Awaitable[None]]
EventHandler = Callable[[RelayId, Event], Awaitable[None]]
RequestHandler = Callable[[Request], Awaitable[Any]]

_channel_ids = itertools.count(1)


async def _no_transport(code: int, reason: str) -> None:
    return None


class RelayLink:
    """One authenticated relay connection, seen from the server."""

    def __init__(
        self,
        relay_id: RelayId,
        connection: Connection,
        send: SendFrame,
        *,
        on_event: EventHandler,
        on_request: RequestHandler,
    ) -> None:
        self.relay_id = relay_id
        self.connection = connection
        self.capabilities: frozenset[str] = frozenset()
        self._send = send
        self._on_event = on_event
        self._on_request = on_request
        self._write_lock = asyncio.Lock()
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._channels: dict[ChannelId, ServerChannel] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()
        self.close_reason = ""
        self.close_transport: Callable[[int, str], Awaitable[None]] = _no_transport

    async def flush(self) -> None:
        """Write every frame the connection has queued, in order."""
        async with self._write_lock:
            for frame in self.connection.data_to_send():
                await self._send(frame)

    async def request(
        self, op: str, args: dict[str, Any] | None = None, timeout_s: float = 30.0
    ) -> Any:
        """Ask the relay to run ``op``; return its result or raise :class:`OpError`."""
        if self.closed.is_set():
            raise OpError(ErrorCode.RELAY_UNREACHABLE, "relay is not connected")
        timeout_ms = max(1, int(timeout_s * 1000))
        request_id = self.connection.send_request(op, args, timeout_ms)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.flush()
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            raise RequestTimeout(op, timeout_ms) from None
        finally:
            if self._pending.pop(request_id, None) is not None:
                self.connection.cancel(request_id)
                await self._flush_quietly()

    async def _flush_quietly(self) -> None:
        if not self.closed.is_set():
            try:
                await self.flush()
            except Exception:
                log.debug("flush after cancel failed", exc_info=True)

    async def open_channel(self, target: dict[str, Any], timeout_s: float = 10.0) -> ServerChannel:
        """Open a relay channel to ``target``; the relay connects before it answers."""
        channel_id = ChannelId(next(_channel_ids) & 0xFFFFFFFF)
        self.connection.open_channel(channel_id)
        channel = ServerChannel(channel_id, self)
        self._channels[channel_id] = channel
        try:
            await self.request(
                "channel.open", {"channel_id": channel_id, "target": target}, timeout_s
            )
        except BaseException:
            self._channels.pop(channel_id, None)
            self.connection.close_channel(channel_id, ChannelCloseCode.ERROR, "open failed")
            await self._flush_quietly()
            raise
        return channel

    def forget_channel(self, channel_id: ChannelId) -> None:
        self._channels.pop(channel_id, None)

    @property
    def open_channels(self) -> int:
        return len(self._channels)

    async def handle(self, events: list[WireEvent]) -> None:
        """React to the events one received frame produced."""
        for event in events:
            await self._handle_one(event)
        await self.flush()

    async def _handle_one(self, event: WireEvent) -> None:
        match event:
            case ResponseReceived(response):
                future = self._pending.pop(response.id, None)
                if future is not None and not future.done():
                    if response.ok:
                        future.set_result(response.result)
                    else:
                        future.set_exception(OpError.from_dict(response.error or {}))
            case ChannelData(channel_id, payload):
                channel = self._channels.get(channel_id)
                if channel is not None:
                    channel.feed(payload)
            case ChannelCredit(channel_id, _):
                channel = self._channels.get(channel_id)
                if channel is not None:
                    channel.credit_arrived()
            case ChannelClosed(channel_id, code, reason, _):
                channel = self._channels.pop(channel_id, None)
                if channel is not None:
                    channel.closed_by_peer(code, reason)
            case EventReceived(wire_event):
                self._spawn(self._on_event(self.relay_id, wire_event))
            case RequestReceived(request):
                self._spawn(self._answer(request))
            case CancelReceived() | Notice():
                log.info("relay %s: %s", self.relay_id, event)
            case _:
                log.warning("relay %s: unexpected event %s", self.relay_id, type(event).__name__)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: Request) -> None:
        try:
            result = await self._on_request(request)
        except OpError as err:
            self.connection.send_error(request.id, err)
        except Exception:
            log.exception("relay %s: request %s failed", self.relay_id, request.op)
            self.connection.send_error(request.id, OpError(ErrorCode.INTERNAL, "internal error"))
        else:
            self.connection.send_result(request.id, result)
        await self._flush_quietly()

    async def shutdown(self, reason: str) -> None:
        """Fail pending requests, close channels and cancel tasks: the transport is gone."""
        self.close_reason = reason
        self.closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(OpError(ErrorCode.RELAY_UNREACHABLE, f"relay {reason}"))
        self._pending.clear()
        for channel in list(self._channels.values()):
            channel.closed_by_peer(ChannelCloseCode.RELAY_GONE, "relay unreachable")
        self._channels.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
