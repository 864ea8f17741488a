"""The server's WebSocket protocol (uvicorn's, streaming binary messages) over real sockets."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import random
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import pytest
import pytest_asyncio
import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.frames import Frame, Opcode

from server.websocket_protocol import QUEUED_MESSAGES, STREAM_IN_MIN, StreamingWebSocketProtocol
from tests.support.processes import free_port, scaled
from tests.support.stack import wait_until
from wire.websocket import binary_frame_header

pytestmark = pytest.mark.unit

SIZES = [0, 1, 125, 126, 127, 65535, 65536, 65537, 1 << 20]


@pytest.mark.parametrize("size", SIZES)
def test_frames_are_byte_for_byte_what_websockets_writes(size: int) -> None:
    data = os.urandom(size)
    expected = Frame(Opcode.BINARY, data).serialize(mask=False)
    assert binary_frame_header(size) + data == expected


def _digest(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + hashlib.sha256(data).digest()


def echo(*, delay_s: float = 0.0, say_kind: bool = False) -> Callable[[WebSocket], Awaitable[None]]:
    """An endpoint answering each binary message with its digest (after ``"view:"`` or
    ``"copy:"``, how it was handed over, when ``say_kind``) and each text upper-cased, taking
    ``delay_s`` over each (a busy consumer)."""

    async def endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                await asyncio.sleep(delay_s)
                if (data := message.get("bytes")) is None:
                    await websocket.send_text(message["text"].upper())
                    continue
                kind = b""
                if say_kind:
                    view = isinstance(data, memoryview) and data.readonly
                    kind = b"view:" if view else b"copy:"
                await websocket.send_bytes(kind + _digest(data))
        except WebSocketDisconnect:
            return

    return endpoint


async def stream(websocket: WebSocket) -> None:
    """Send binary messages of every size in ``SIZES``, then a text message."""
    await websocket.accept()
    for size in SIZES:
        await websocket.send_bytes(bytes([size % 251]) * size)
    await websocket.send_text("done")
    await websocket.receive()


MAX_SIZE = 2 * 1024 * 1024


@dataclass(frozen=True)
class Served:
    url: str
    server: uvicorn.Server


@pytest.fixture
def server_url(served: Served) -> str:
    return served.url


@pytest.fixture(params=["asyncio", "uvloop"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """The protocol under uvicorn, on its own thread and loop: the standard one, and uvloop, the
    server's (which reads into a buffered protocol under other conditions than asyncio)."""
    app = Starlette(
        routes=[
            WebSocketRoute("/echo", echo(delay_s=0.002)),
            WebSocketRoute("/stream", stream),
            WebSocketRoute("/kind", echo(say_kind=True)),
        ]
    )
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        ws=StreamingWebSocketProtocol,
        ws_per_message_deflate=False,
        ws_max_size=MAX_SIZE,
        log_config=None,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def serve() -> None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(server.serve())

    thread = threading.Thread(target=serve, name=f"uvicorn-{request.param}", daemon=True)
    thread.start()
    deadline = time.monotonic() + scaled(10)
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield Served(f"ws://127.0.0.1:{port}", server)
    finally:
        server.should_exit = True
        thread.join(scaled(10))
        assert not thread.is_alive(), "the server did not stop"


async def test_many_queued_messages_arrive_whole_and_in_order(server_url: str) -> None:
    # Sent back to back to a consumer that is slower than the sender: the server queues up to
    # QUEUED_MESSAGES before it stops reading, and nothing is lost or reordered.
    messages = [os.urandom(size) for size in SIZES * 3]
    assert len(messages) > 4 * QUEUED_MESSAGES
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{server_url}/echo", max_msg_size=0) as ws,
    ):
        for data in messages:
            await ws.send_bytes(data)
        await ws.send_str("text after binary")
        for data in messages:
            reply = await asyncio.wait_for(ws.receive_bytes(), scaled(10))
            assert reply == _digest(data)
        assert await asyncio.wait_for(ws.receive_str(), scaled(10)) == "TEXT AFTER BINARY"


async def test_connections_share_one_read_buffer_and_interleave_whole(served: Served) -> None:
    # A relay fleet is thousands of mostly idle connections: they read into one buffer per
    # event loop, never one each, and messages of many connections interleaved (large ones
    # split across reads) still arrive whole on each.
    async def exchange(ws: aiohttp.ClientWebSocketResponse, seed: int) -> None:
        sizes = random.Random(seed).sample(SIZES, len(SIZES))
        for size in sizes:
            data = os.urandom(size)
            await ws.send_bytes(data)
            assert await asyncio.wait_for(ws.receive_bytes(), scaled(10)) == _digest(data)

    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        sockets = [
            await stack.enter_async_context(
                session.ws_connect(f"{served.url}/echo", max_msg_size=0)
            )
            for _ in range(8)
        ]
        await asyncio.gather(*(exchange(ws, n) for n, ws in enumerate(sockets)))
        protocols = [
            p
            for p in served.server.server_state.connections
            if isinstance(p, StreamingWebSocketProtocol)
        ]
        assert len(protocols) == len(sockets)
        assert len({id(p.get_buffer(-1).obj) for p in protocols}) == 1


async def test_streamed_binary_messages_and_pings_keep_their_order(server_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{server_url}/stream", max_msg_size=0, autoping=False) as ws,
    ):
        await ws.ping(b"are you there")
        received: list[bytes] = []
        pong = done = False
        while not (pong and done):
            message = await asyncio.wait_for(ws.receive(), scaled(10))
            if message.type == aiohttp.WSMsgType.PONG:
                assert message.data == b"are you there"
                pong = True
            elif message.type == aiohttp.WSMsgType.BINARY:
                assert not done, "a binary message after the text that followed it"
                received.append(message.data)
            else:
                assert (message.type, message.data) == (aiohttp.WSMsgType.TEXT, "done")
                done = True
        assert received == [bytes([size % 251]) * size for size in SIZES]


async def test_invalid_utf8_text_still_closes_with_1007(server_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{server_url}/echo") as ws,
    ):
        # A text frame whose payload is not UTF-8, written as a raw frame.
        ws._writer.transport.write(bytes([0x81, 0x82, 0, 0, 0, 0, 0xC3, 0x28]))
        message = await asyncio.wait_for(ws.receive(), scaled(10))
        assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert ws.close_code == 1007


# -- frames written byte by byte, the way a client of any library might split them ------------


def client_frame(
    opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
) -> bytes:
    """One client frame (RFC 6455 §5.2), masked with a random key unless ``masked`` is False."""
    first = (0x80 if fin else 0) | rsv | opcode
    mask_bit = 0x80 if masked else 0
    if len(payload) < 126:
        head = struct.pack("!BB", first, mask_bit | len(payload))
    elif len(payload) < 65536:
        head = struct.pack("!BBH", first, mask_bit | 126, len(payload))
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, len(payload))
    if not masked:
        return head + payload
    key = os.urandom(4)
    tiled = (key * (len(payload) // 4 + 1))[: len(payload)]
    body = (int.from_bytes(payload, "big") ^ int.from_bytes(tiled, "big")).to_bytes(
        len(payload), "big"
    )
    return head + key + body


def header_of(frames: bytes) -> bytes:
    """``frames`` up to the end of the last one's header (its payload left out)."""
    at = 0
    while True:
        second = frames[at + 1]
        short = second & 0x7F
        size = 2 + (2 if short == 126 else 8 if short == 127 else 0) + (4 if second & 0x80 else 0)
        length = (
            short
            if short < 126
            else int.from_bytes(frames[at + 2 : at + size - 4 * bool(second & 0x80)], "big")
        )
        if at + size + length >= len(frames):
            return frames[: at + size]
        at += size + length


class RawClient:
    """A WebSocket client on a bare socket: writes whatever bytes a test gives it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, url: str, path: str) -> RawClient:
        host, port = url.removeprefix("ws://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 24)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), scaled(10))
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    async def write_in_pieces(self, data: bytes, seed: int) -> None:
        """``data`` in pieces of random sizes (1 byte to 200 KB), each its own write."""
        rng = random.Random(seed)
        at = 0
        while at < len(data):
            size = rng.choice((1, 2, 3, 5, 14, 100, 4096, 65535, 65536, 70_000, 200_000))
            self.writer.write(data[at : at + size])
            await self.writer.drain()
            at += size

    async def frame(self) -> tuple[int, bytes]:
        """The server's next frame: (opcode, payload); (-1, b"") when the connection ended."""
        try:
            first, second = await asyncio.wait_for(self.reader.readexactly(2), scaled(10))
        except asyncio.IncompleteReadError:
            return -1, b""
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return first & 0x0F, await self.reader.readexactly(length)

    async def close_code(self) -> int:
        """Read until the server's close frame; its status code."""
        while True:
            opcode, payload = await self.frame()
            if opcode == 0x8:
                return int(struct.unpack("!H", payload[:2])[0])
            assert opcode != -1, "the connection ended without a close frame"

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@pytest_asyncio.fixture
async def raw(server_url: str) -> AsyncIterator[RawClient]:
    client = await RawClient.connect(server_url, "/kind")
    try:
        yield client
    finally:
        await client.aclose()


BIG = STREAM_IN_MIN


@pytest.mark.parametrize("seed", range(4))
async def test_every_kind_of_frame_split_anywhere_arrives_whole_and_in_order(
    raw: RawClient, seed: int
) -> None:
    # Final binary frames from STREAM_IN_MIN up are read into their own buffer; everything else
    # (small frames, text, pings, fragmented messages even with large fragments) goes through
    # websockets. Mixed and split at random points, every message comes back in order.
    rng = random.Random(seed)
    expected: list[tuple[int, bytes]] = []
    stream = bytearray()
    for size in [0, 1, 125, 126, 65535, BIG - 1, BIG, BIG + 1, 1 << 20, MAX_SIZE]:
        data = rng.randbytes(size)
        stream += client_frame(0x2, data)
        kind = b"view:" if size >= BIG else b"copy:"
        expected.append((0x2, kind + _digest(data)))
        stream += client_frame(0x9, b"ping %d" % size)  # answered with a pong, in order
        expected.append((0xA, b"ping %d" % size))
        stream += client_frame(0x1, f"text after {size}".encode())
        expected.append((0x1, f"TEXT AFTER {size}".encode()))
    # A fragmented message with large fragments and a ping between them: websockets' job.
    parts = [rng.randbytes(BIG + 10), rng.randbytes(BIG * 2), rng.randbytes(5)]
    stream += client_frame(0x2, parts[0], fin=False)
    stream += client_frame(0x9, b"between fragments")
    stream += client_frame(0x0, parts[1], fin=False)
    stream += client_frame(0x0, parts[2])
    expected += [(0xA, b"between fragments"), (0x2, b"copy:" + _digest(b"".join(parts)))]
    big_text = "ünïcode text " * 6000  # a large text frame is websockets' too
    stream += client_frame(0x1, big_text.encode())
    expected.append((0x1, big_text.upper().encode()))
    stream += client_frame(0x2, b"after the fragments" * 5000)
    expected.append((0x2, b"view:" + _digest(b"after the fragments" * 5000)))

    await raw.write_in_pieces(bytes(stream), seed)
    # Pongs come from the protocol at once and replies from the application later: each kind
    # keeps its own order.
    replies: list[tuple[int, bytes]] = []
    pongs: list[tuple[int, bytes]] = []
    while len(replies) + len(pongs) < len(expected):
        opcode, payload = await raw.frame()
        (pongs if opcode == 0xA else replies).append((opcode, payload))
    assert pongs == [frame for frame in expected if frame[0] == 0xA]
    assert replies == [frame for frame in expected if frame[0] != 0xA]


async def test_a_large_frame_over_the_size_limit_closes_with_1009(raw: RawClient) -> None:
    raw.writer.write(client_frame(0x2, os.urandom(BIG)))  # a streamed one first: still fine
    assert (await raw.frame())[1].startswith(b"view:")
    # Only the header: the server refuses the frame as soon as it reads its length (it would
    # reset the connection if it closed with the payload still unread).
    raw.writer.write(header_of(client_frame(0x2, bytes(MAX_SIZE + 1))))
    assert await raw.close_code() == 1009


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        # Refused on the header: its payload stays unsent (a server that closes with unread
        # bytes resets the connection, and the close frame may be lost).
        (header_of(client_frame(0x2, b"x" * BIG, masked=False)), "a frame without a mask"),
        # Refused once the frame is in.
        (client_frame(0x2, b"x" * BIG, rsv=0x40), "a reserved bit without an extension"),
        (
            client_frame(0x2, b"x" * 10, fin=False) + client_frame(0x2, b"y" * BIG),
            "a new message inside a fragmented one",
        ),
        (client_frame(0x0, b"x" * BIG), "a continuation without a message"),
    ],
)
async def test_large_malformed_frames_are_refused_as_before(
    raw: RawClient, frame: bytes, why: str
) -> None:
    raw.writer.write(frame)
    assert await raw.close_code() == 1002, why


async def test_a_peer_gone_in_the_middle_of_a_streamed_frame_leaves_nothing_open(
    served: Served,
) -> None:
    state = served.server.server_state
    client = await RawClient.connect(served.url, "/kind")
    client.writer.write(client_frame(0x2, os.urandom(BIG)))
    assert (await client.frame())[1].startswith(b"view:")
    frame = client_frame(0x2, os.urandom(BIG * 8))
    client.writer.write(frame[: len(frame) // 2])  # half a frame, then the peer is gone
    await client.writer.drain()
    await wait_until(
        lambda: any(getattr(p, "_filled", 0) for p in state.connections),
        5,
        "the server to be in the middle of the frame",
    )
    assert len(state.connections) == 1
    client.writer.transport.abort()
    await wait_until(
        lambda: not state.connections and not state.tasks,
        5,
        "the server to drop the connection and end its application task",
    )
