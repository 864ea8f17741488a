"""The server's WebSocket protocol (uvicorn's, streaming binary messages) over real sockets."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.frames import Frame, Opcode

from server.websocket_protocol import QUEUED_MESSAGES, StreamingWebSocketProtocol
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


async def digest_echo(websocket: WebSocket) -> None:
    """Answer each binary message with its length and SHA-256, slowly (a busy consumer)."""
    await websocket.accept()
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            await asyncio.sleep(0.002)
            if (data := message.get("bytes")) is not None:
                await websocket.send_bytes(_digest(data))
            else:
                await websocket.send_text(message["text"].upper())
    except WebSocketDisconnect:
        return


async def stream(websocket: WebSocket) -> None:
    """Send binary messages of every size in ``SIZES``, then a text message."""
    await websocket.accept()
    for size in SIZES:
        await websocket.send_bytes(bytes([size % 251]) * size)
    await websocket.send_text("done")
    await websocket.receive()


@pytest_asyncio.fixture
async def server_url() -> AsyncIterator[str]:
    app = Starlette(
        routes=[WebSocketRoute("/echo", digest_echo), WebSocketRoute("/stream", stream)]
    )
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, ws=StreamingWebSocketProtocol,
        ws_per_message_deflate=False, log_config=None, lifespan="off",
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await wait_until(lambda: server.started, 10, "the server to start")
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, scaled(10))


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
