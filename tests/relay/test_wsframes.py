"""Frames the relay builds in place: what a real WebSocket server reads from them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from relay.wsframes import HEADROOM, AiohttpFrames, frame_in_place
from wire.websocket import mask_in_place

pytestmark = pytest.mark.unit

# Every length encoding of a frame header and its edges, and a chunk the size of a read.
LENGTHS = (0, 1, 125, 126, 127, 65535, 65536, 65537, 256 * 1024)


def masked(data: bytes, mask: bytes) -> bytes:
    return bytes(byte ^ mask[index % 4] for index, byte in enumerate(data))


def test_masking_in_place_matches_the_rfc_at_any_alignment_and_length() -> None:
    for offset in range(12):
        for length in (0, 1, 3, 7, 8, 9, 15, 16, 17, 100, 1001):
            buffer = bytearray(os.urandom(offset + length + 3))
            before = bytes(buffer)
            mask = os.urandom(4)
            mask_in_place(memoryview(buffer)[offset : offset + length], mask)
            end = offset + length
            assert bytes(buffer[offset:end]) == masked(before[offset:end], mask)
            assert buffer[:offset] == before[:offset] and buffer[end:] == before[end:]


def open_server_protocol() -> ServerProtocol:
    """websockets' own server state machine, past its handshake."""
    protocol = ServerProtocol(max_size=None)
    protocol.receive_data(
        b"GET / HTTP/1.1\r\nHost: relaydesk\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    [request] = protocol.events_received()
    assert isinstance(request, Request)
    protocol.send_response(protocol.accept(request))
    return protocol


@pytest.mark.parametrize("length", LENGTHS)
def test_a_frame_built_in_place_reads_back_as_its_payload(length: int) -> None:
    protocol = open_server_protocol()
    payload = os.urandom(length)
    buffer = bytearray(HEADROOM) + payload
    begin = frame_in_place(buffer, HEADROOM)
    assert begin >= 0
    protocol.receive_data(bytes(buffer[begin:]))
    [frame] = protocol.events_received()
    assert isinstance(frame, Frame)
    assert frame.opcode is Opcode.BINARY and frame.fin
    assert frame.data == payload
    assert bytes(buffer[HEADROOM:]) != payload or length < 8  # masked where it lies


def test_a_frame_without_room_for_its_header_is_refused() -> None:
    with pytest.raises(ValueError, match="no room"):
        frame_in_place(bytearray(b"xy" * 100), 4)


@pytest.fixture
async def echo_server() -> AsyncIterator[tuple[str, asyncio.Queue[str | bytes]]]:
    """A real WebSocket server (websockets) that records every message it receives."""
    received: asyncio.Queue[str | bytes] = asyncio.Queue()

    async def handler(connection: ServerConnection) -> None:
        async for message in connection:
            await received.put(message)

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/", received


async def test_frames_written_beside_aiohttps_own_arrive_whole_and_in_order(echo_server) -> None:
    url, received = echo_server
    chunks = [os.urandom(length) for length in (5, 70_000, 256 * 1024)]
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        frames = AiohttpFrames.of(ws)
        assert frames is not None, "aiohttp's connection is not reachable: frames get copied"
        await ws.send_str("first")
        for chunk in chunks:
            frames.write_binary(bytearray(HEADROOM) + chunk, HEADROOM)
            await frames.drain()
            await ws.send_bytes(b"between")
        expected = ["first"] + [m for chunk in chunks for m in (chunk, b"between")]
        for message in expected:
            assert await asyncio.wait_for(received.get(), 10) == message
        closing = asyncio.create_task(ws.close())
        await asyncio.sleep(0)  # aiohttp has sent its close frame: nothing may follow it
        with pytest.raises(ConnectionResetError):
            frames.write_binary(bytearray(HEADROOM) + b"late", HEADROOM)
        await closing
        with pytest.raises(ConnectionResetError):
            frames.write_binary(bytearray(HEADROOM) + b"later", HEADROOM)
