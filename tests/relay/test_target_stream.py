"""The relay's target stream over real sockets: bounded buffering, order, and ends."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from relay.channels import HIGH_WATER, READ_SIZE, TargetStream
from relay.wsframes import HEADROOM
from tests.support.stack import wait_until

pytestmark = pytest.mark.unit


@pytest.fixture
async def pair() -> AsyncIterator[tuple[TargetStream, asyncio.StreamReader, asyncio.StreamWriter]]:
    """A TargetStream connected to a real TCP server whose end the test drives."""
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put((reader, writer))

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await TargetStream.connect("127.0.0.1", port)
    reader, writer = await accepted.get()
    try:
        yield stream, reader, writer
    finally:
        writer.close()
        await stream.aclose()
        server.close()
        await server.wait_closed()


async def test_a_stream_nobody_reads_stops_reading_its_socket(pair) -> None:
    stream, _, writer = pair
    sent = os.urandom(8 * 1024 * 1024)
    writer.write(sent)  # far more than the relay may hold for a channel waiting on credit
    await wait_until(lambda: stream._reading_paused, 5, "reading to pause")
    await asyncio.sleep(0.2)  # nothing more is read while paused
    assert HIGH_WATER <= stream._buffered < HIGH_WATER + READ_SIZE
    assert writer.transport.get_write_buffer_size() > 0  # the rest waits in the sender

    received = bytearray()
    while len(received) < len(sent):
        chunk = await stream.read()
        received += chunk[HEADROOM:]  # each chunk keeps room for its frame headers in front
        assert stream._buffered < HIGH_WATER + READ_SIZE
    assert bytes(received) == sent  # everything, in order, once drained


async def test_small_reads_hold_small_buffers_and_large_ones_are_not_copied(pair) -> None:
    stream, _, writer = pair
    writer.write(b"hello")
    small = await stream.read()
    assert len(small) == HEADROOM + 5 and isinstance(small, bytearray)
    sent = os.urandom(4 * 1024 * 1024)
    writer.write(sent)
    received = bytearray()
    while len(received) < len(sent):
        chunk = await stream.read()
        received += chunk[HEADROOM:]
        assert len(chunk) <= HEADROOM + READ_SIZE
    assert bytes(received) == sent


async def test_writes_arrive_in_order_and_the_end_reads_empty(pair) -> None:
    stream, reader, writer = pair
    for part in (b"RFB ", memoryview(b"003.008\n"), b"x" * 100_000):
        await stream.write(part)
    assert await reader.readexactly(12 + 100_000) == b"RFB 003.008\n" + b"x" * 100_000
    writer.write(b"bye")
    writer.close()
    assert (await stream.read())[HEADROOM:] == b"bye"
    assert not await stream.read()  # the target hung up


async def test_writing_after_the_target_is_gone_raises(pair) -> None:
    stream, _, writer = pair
    writer.close()
    assert not await stream.read()
    await stream.aclose()
    with pytest.raises(ConnectionResetError):
        await stream.write(b"more")
