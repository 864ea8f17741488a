"""The shared asyncio driver (``wire.link``): two links joined by in-memory frame queues."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from wire.connection import Connection, Role
from wire.errors import ChannelCloseCode, ErrorCode, OpError
from wire.frames import Payload
from wire.ids import ChannelId, RelayId
from wire.link import Link
from wire.messages import PROTOCOL_VERSION, Event, Hello, Request, Welcome

pytestmark = pytest.mark.unit

Answer = Callable[[Request], Awaitable[Any]]


class Pipe:
    """Frames one link sends, read by a pump into the other link."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[str | bytes] = asyncio.Queue()

    async def send(self, frame: str | bytes) -> None:
        await self.frames.put(frame)


async def _pump(pipe: Pipe, link: Link) -> None:
    while True:
        frame = await pipe.frames.get()
        if isinstance(frame, str):
            events = list(link.connection.receive_text(frame))
        else:
            events = list(link.connection.receive_bytes(frame))
        await link.handle(events)


class Recorder:
    """A channel end that remembers what reached it."""

    def __init__(self, channel_id: ChannelId) -> None:
        self.channel_id = channel_id
        self.data: list[bytes] = []
        self.closed: tuple[ChannelCloseCode, str, bool] | None = None

    def feed(self, payload: Payload) -> None:
        self.data.append(bytes(payload))

    def credit_arrived(self) -> None:
        pass

    async def close(self, code: ChannelCloseCode, reason: str, *, tell_peer: bool = True) -> None:
        self.closed = (code, reason, tell_peer)


async def _joined(
    answer: Answer, heard: list[Event] | None = None
) -> tuple[Link, Link, list[asyncio.Task[None]]]:
    """A server-side and a relay-side link past the handshake, pumps running."""
    server_conn, relay_conn = Connection(Role.SERVER), Connection(Role.RELAY)
    to_server, to_relay = Pipe(), Pipe()

    async def hear(event: Event) -> None:
        if heard is not None:
            heard.append(event)

    async def nothing(request: Request) -> Any:
        raise OpError(ErrorCode.UNKNOWN_OP)

    server = Link(server_conn, to_relay.send, on_request=nothing, on_event=hear)
    relay = Link(relay_conn, to_server.send, on_request=answer, max_concurrency=2)
    relay_conn.send_hello(Hello(PROTOCOL_VERSION, "test"))
    server_conn.receive_text(relay_conn.data_to_send()[0])  # type: ignore[arg-type]
    server_conn.accept(Welcome(RelayId("r1"), 15.0, 1 << 20, 16 << 20))
    relay_conn.receive_text(server_conn.data_to_send()[0])  # type: ignore[arg-type]
    pumps = [
        asyncio.create_task(_pump(to_server, server)),
        asyncio.create_task(_pump(to_relay, relay)),
    ]
    return server, relay, pumps


async def _stop(pumps: list[asyncio.Task[None]]) -> None:
    for pump in pumps:
        pump.cancel()
    await asyncio.gather(*pumps, return_exceptions=True)


async def test_a_request_is_answered_and_an_error_comes_back_as_op_error() -> None:
    async def answer(request: Request) -> Any:
        if request.op == "ping":
            return {"echo": request.args.get("n")}
        raise OpError(ErrorCode.NOT_RUNNING, "nothing there")

    server, _relay, pumps = await _joined(answer)
    try:
        assert await server.request("ping", {"n": 7}, 5) == {"echo": 7}
        with pytest.raises(OpError) as caught:
            await server.request("desktop.status", {}, 5)
        assert caught.value.code is ErrorCode.NOT_RUNNING
    finally:
        await _stop(pumps)


async def test_a_timed_out_request_cancels_the_answer_on_the_other_end() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def answer(request: Request) -> Any:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    server, _relay, pumps = await _joined(answer)
    try:
        with pytest.raises(OpError) as caught:
            await server.request("slow", {}, 0.2)
        assert caught.value.code is ErrorCode.TIMEOUT
        await asyncio.wait_for(cancelled.wait(), 5)
    finally:
        await _stop(pumps)


async def test_events_reach_the_handler_and_channel_frames_reach_their_channel() -> None:
    heard: list[Event] = []

    async def answer(request: Request) -> Any:
        return {}

    server, relay, pumps = await _joined(answer, heard)
    try:
        relay.connection.send_event("desktop.changed", {"state": "failed"})
        await relay.flush()
        channel_id = ChannelId(9)
        server_end, relay_end = Recorder(channel_id), Recorder(channel_id)
        server.add_channel(server_end)
        relay.add_channel(relay_end)
        relay.connection.send_data(channel_id, b"frame")
        await relay.flush()
        relay.connection.close_channel(channel_id, ChannelCloseCode.TARGET_CLOSED, "done")
        await relay.flush()
        for _ in range(100):
            if heard and server_end.closed:
                break
            await asyncio.sleep(0.01)
        assert [event.name for event in heard] == ["desktop.changed"]
        assert server_end.data == [b"frame"]
        assert server_end.closed == (ChannelCloseCode.TARGET_CLOSED, "done", False)
        assert server.open_channels == 0
    finally:
        await _stop(pumps)


async def test_shutdown_fails_pending_requests_and_closes_channels() -> None:
    async def answer(request: Request) -> Any:
        await asyncio.sleep(30)

    server, relay, pumps = await _joined(answer)
    channel = Recorder(ChannelId(3))
    server.add_channel(channel)
    pending = asyncio.create_task(server.request("slow", {}, 30))
    await asyncio.sleep(0.05)
    await server.shutdown("disconnected", "relay unreachable")
    with pytest.raises(OpError) as caught:
        await pending
    assert caught.value.code is ErrorCode.RELAY_UNREACHABLE
    assert channel.closed == (ChannelCloseCode.RELAY_GONE, "relay unreachable", False)
    with pytest.raises(OpError):
        await server.request("ping", {}, 1)
    await relay.shutdown("disconnected")
    await _stop(pumps)
