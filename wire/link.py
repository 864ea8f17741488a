"""The one asyncio driver of :class:`wire.connection.Connection`, for both ends of a relay link.

The only module of ``wire`` that imports asyncio; it still does no I/O of its own: ``send``
writes one frame to whatever transport the caller owns (Starlette's WebSocket on the server,
aiohttp's on the relay). The server's ``RelayLink`` and the relay's ``ServerLink`` extend it
with what only their side does (opening channels and knowing the relay's capabilities; sending
chunks framed in place).

A :class:`Link` owns the futures of the requests it sent, the tasks of the requests it
answers (at most ``max_concurrency`` run at once, each bounded by its ``timeout_ms`` and
cancelled by a ``cancel``), and its open channels. Channel frames never enter the request pool:
:meth:`handle` hands them to their channel in wire order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

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
from wire.frames import Payload
from wire.ids import ChannelId, RequestId
from wire.messages import Event, Request

log = logging.getLogger(__name__)

# How long a closing link still lets the handlers of events already received finish.
EVENT_GRACE_S = 2.0

SendFrame = Callable[[str | bytes], Awaitable[None]]
AnswerRequest = Callable[[Request], Awaitable[Any]]
HearEvent = Callable[[Event], Awaitable[None]]


class LinkChannel(Protocol):
    """One end of a channel as the link sees it: bytes and credit in, a close."""

    channel_id: ChannelId

    def feed(self, payload: Payload) -> None: ...

    def credit_arrived(self) -> None: ...

    async def close(
        self, code: ChannelCloseCode, reason: str, *, tell_peer: bool = True
    ) -> None: ...


class Link:
    """Drives one :class:`Connection` over an asyncio transport."""

    # How messages name the other end ("relay", "server").
    peer: ClassVar[str] = "peer"

    def __init__(
        self,
        connection: Connection,
        send: SendFrame,
        *,
        on_request: AnswerRequest,
        on_event: HearEvent | None = None,
        max_concurrency: int = 64,
    ) -> None:
        self.connection = connection
        self._send = send
        self._on_request = on_request
        self._on_event = on_event
        self._pool = asyncio.Semaphore(max_concurrency)
        self._write_lock = asyncio.Lock()
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._answering: dict[RequestId, asyncio.Task[None]] = {}
        self._channels: dict[ChannelId, LinkChannel] = {}
        self._background: set[asyncio.Task[None]] = set()  # channel closes: awaited
        self._hearing: set[asyncio.Task[None]] = set()  # event handlers: cancelled
        self.closed = asyncio.Event()
        self.close_reason = ""

    async def flush(self) -> None:
        """Write every frame the connection has queued, in order."""
        async with self._write_lock:
            for frame in self.connection.data_to_send():
                await self._send(frame)

    async def flush_quietly(self) -> None:
        """:meth:`flush` where a transport that is going away is no news (logged at debug)."""
        if self.closed.is_set():
            return
        try:
            await self.flush()
        except Exception:
            log.debug("flush to the %s failed", self.peer, exc_info=True)

    # -- requests this end sends ---------------------------------------------------------------

    async def request(
        self, op: str, args: dict[str, Any] | None = None, timeout_s: float = 30.0
    ) -> Any:
        """Ask the peer to run ``op``; return its result or raise :class:`OpError`."""
        if self.closed.is_set():
            raise self.gone_error("is not connected")
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
                await self.flush_quietly()

    def gone_error(self, reason: str) -> OpError:
        """What a request to a peer that went away fails with."""
        return OpError(ErrorCode.RELAY_UNREACHABLE, f"{self.peer} {reason}")

    # -- channels ------------------------------------------------------------------------------

    def add_channel(self, channel: LinkChannel) -> None:
        """Route the frames of ``channel``'s id to it from now on."""
        self.connection.open_channel(channel.channel_id)
        self._channels[channel.channel_id] = channel

    def forget_channel(self, channel_id: ChannelId) -> None:
        self._channels.pop(channel_id, None)

    @property
    def open_channels(self) -> int:
        return len(self._channels)

    # -- what one received frame produced ------------------------------------------------------

    async def handle(self, events: list[WireEvent]) -> None:
        """React to the events one received frame produced, then send what they queued."""
        for event in events:
            self._handle_one(event)
        await self.flush()

    def _handle_one(self, event: WireEvent) -> None:
        match event:
            case ChannelData(channel_id, payload):
                if channel := self._channels.get(channel_id):
                    channel.feed(payload)
            case ChannelCredit(channel_id, _):
                if channel := self._channels.get(channel_id):
                    channel.credit_arrived()
            case ChannelClosed(channel_id, code, reason, by_peer):
                if channel := self._channels.pop(channel_id, None):
                    self._spawn(channel.close(code, reason, tell_peer=not by_peer))
            case ResponseReceived(response):
                future = self._pending.pop(response.id, None)
                if future is not None and not future.done():
                    if response.ok:
                        future.set_result(response.result)
                    else:
                        future.set_exception(OpError.from_dict(response.error or {}))
            case RequestReceived(request):
                task = asyncio.create_task(self._answer(request), name=f"op-{request.op}")
                self._answering[request.id] = task
            case CancelReceived(request_id):
                if answering := self._answering.pop(request_id, None):
                    answering.cancel()
            case EventReceived(wire_event) if self._on_event is not None:
                hearing = asyncio.ensure_future(self._on_event(wire_event))
                self._hearing.add(hearing)
                hearing.add_done_callback(self._hearing.discard)
            case EventReceived() | Notice():
                log.info("%s: %s", self.peer, event)
            case _:
                log.warning("%s: unexpected event %s", self.peer, type(event).__name__)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _answer(self, request: Request) -> None:
        try:
            async with self._pool, asyncio.timeout(request.timeout_ms / 1000):
                result = await self._on_request(request)
        except OpError as err:
            self.connection.send_error(request.id, err)
        except TimeoutError:
            message = f"{request.op} did not finish within {request.timeout_ms} ms"
            self.connection.send_error(request.id, OpError(ErrorCode.TIMEOUT, message))
        except asyncio.CancelledError:
            self.connection.send_error(request.id, OpError(ErrorCode.CANCELLED))
            return
        except Exception:
            log.exception("%s: op %s failed", self.peer, request.op)
            self.connection.send_error(request.id, OpError(ErrorCode.INTERNAL, "internal error"))
        else:
            self.connection.send_result(request.id, result)
        finally:
            self._answering.pop(request.id, None)
        await self.flush_quietly()

    # -- the transport is gone -----------------------------------------------------------------

    async def hear_out(self) -> None:
        """Let the handlers of events already received finish (for ``EVENT_GRACE_S`` at most):
        an event is the peer's account of a fact (a desktop it stopped just before it closed),
        not to be dropped with the connection."""
        if self._hearing:
            await asyncio.wait(set(self._hearing), timeout=EVENT_GRACE_S)

    async def shutdown(self, reason: str, channel_reason: str = "connection lost") -> None:
        """Fail pending requests, cancel answers, close channels: the transport is gone."""
        self.close_reason = reason
        self.closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self.gone_error(reason))
        self._pending.clear()
        for channel in list(self._channels.values()):
            self._spawn(channel.close(ChannelCloseCode.RELAY_GONE, channel_reason, tell_peer=False))
        self._channels.clear()
        await self.hear_out()
        for task in [*self._answering.values(), *self._hearing]:
            task.cancel()
        tasks = [*self._answering.values(), *self._hearing, *self._background]
        self._answering.clear()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
