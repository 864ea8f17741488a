"""An audio listener short of credit loses its oldest packets and never blocks the capture."""

from __future__ import annotations

import asyncio

import pytest

from relay.audio import AudioChannel, frame_packet, parse_packet
from wire.errors import ChannelCloseCode
from wire.ids import ChannelId

pytestmark = pytest.mark.unit


class FakeConnection:
    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.sent: list[bytes] = []
        self.closed: list[tuple[ChannelCloseCode, str]] = []

    def send_window(self, channel_id: ChannelId) -> int:
        return self.credit

    def send_data(self, channel_id: ChannelId, payload: bytes) -> int:
        assert len(payload) <= self.credit, "a packet is never split"
        self.credit -= len(payload)
        self.sent.append(payload)
        return len(payload)

    def consumed(self, channel_id: ChannelId, size: int) -> None:
        pass

    def close_channel(self, channel_id: ChannelId, code: ChannelCloseCode, reason: str) -> bool:
        self.closed.append((code, reason))
        return True


class FakeLink:
    def __init__(self, credit: int) -> None:
        self.connection = FakeConnection(credit)

    async def flush(self) -> None:
        pass

    def forget_channel(self, channel_id: ChannelId) -> None:
        pass


def packet(sequence: int) -> bytes:
    return frame_packet(1_000_000 + sequence, sequence, b"\xfc" + bytes(100))


async def test_short_credit_drops_the_oldest_packets() -> None:
    link = FakeLink(credit=0)
    gone: list[AudioChannel] = []
    channel = AudioChannel(ChannelId(1), link, gone.append, max_packets=5)  # type: ignore[arg-type]
    channel.start()
    for sequence in range(20):
        channel.push(packet(sequence))
    assert channel.queued == 5 and channel.dropped == 15
    link.connection.credit = 10_000
    channel.credit_arrived()
    for _ in range(100):
        if len(link.connection.sent) == 5:
            break
        await asyncio.sleep(0)
    assert [parse_packet(p)[1] for p in link.connection.sent] == [15, 16, 17, 18, 19]
    await channel.close(ChannelCloseCode.NORMAL, "done")
    assert gone == [channel]
    assert link.connection.closed == [(ChannelCloseCode.NORMAL, "done")]


def test_the_header_carries_time_and_sequence() -> None:
    captured, sequence, opus = parse_packet(frame_packet(123_456_789, 7, b"opus"))
    assert (captured, sequence, opus) == (123_456_789, 7, b"opus")
    with pytest.raises(ValueError, match="header"):
        parse_packet(b"short")
